"""yunjey/pytorch-tutorial: a two-layer network on MNIST (the stub's); as is."""

REPO = "yunjey/pytorch-tutorial"
PATH = "tutorials/01-basics/feedforward_neural_network/main.py"
