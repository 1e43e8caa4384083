"""Lightning-AI/pytorch-lightning examples/fabric: the plain-PyTorch image
classifier (Fabric's starting point), a CNN on MNIST (the stub's), two short
epochs with their test passes."""

REPO = "Lightning-AI/pytorch-lightning"
PATH = "examples/fabric/image_classifier/train_torch.py"
ARGV = ("--epochs", "2", "--batch-size", "32", "--log-interval", "4")
STEPS = 16  # eight steps an epoch
