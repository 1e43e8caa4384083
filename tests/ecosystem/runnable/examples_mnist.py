"""pytorch/examples mnist: a CNN on MNIST (the stub's 256 images), four short epochs."""

REPO = "pytorch/examples"
PATH = "mnist/main.py"
# --no-accel keeps the model on the CPU where a GPU is present too.
ARGV = ("--epochs", "4", "--batch-size", "32", "--test-batch-size", "64", "--no-accel")
STEPS = 30
