"""yunjey/pytorch-tutorial: a two-layer CNN on MNIST (the stub's); as is."""

REPO = "yunjey/pytorch-tutorial"
PATH = "tutorials/02-intermediate/convolutional_neural_network/main.py"
