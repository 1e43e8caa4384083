"""yunjey/pytorch-tutorial: linear regression on its fifteen points; as is."""

REPO = "yunjey/pytorch-tutorial"
PATH = "tutorials/01-basics/linear_regression/main.py"
STEPS = 20  # of its 60 epochs, one step each
