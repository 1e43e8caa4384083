"""pytorch/examples imagenet: its own --dummy data (the stub's FakeData) and the
stub's small resnet18."""

REPO = "pytorch/examples"
PATH = "imagenet/main.py"
ARGV = ("--dummy", "--workers", "0", "--batch-size", "8", "--print-freq", "4", "--no-accel")
