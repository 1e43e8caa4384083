"""yunjey/pytorch-tutorial: a ResNet on CIFAR-10 (the stub's); as is."""

REPO = "yunjey/pytorch-tutorial"
PATH = "tutorials/02-intermediate/deep_residual_network/main.py"
STEPS = 8  # a quarter of a second a step on one core
