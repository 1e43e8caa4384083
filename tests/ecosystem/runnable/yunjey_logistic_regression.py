"""yunjey/pytorch-tutorial: logistic regression on MNIST (the stub's); as is."""

REPO = "yunjey/pytorch-tutorial"
PATH = "tutorials/01-basics/logistic_regression/main.py"
