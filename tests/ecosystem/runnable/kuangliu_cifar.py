"""kuangliu/pytorch-cifar: CIFAR-10 (the stub's) with the repository's LeNet."""

REPO = "kuangliu/pytorch-cifar"
PATH = "main.py"
EDITS = (
    # utils reads the terminal's width from `stty size`, which fails without a terminal.
    ("from utils import progress_bar\n", "progress_bar = print\n"),
    # SimpleDLA takes seconds a step on a CPU; LeNet comes from the same models package.
    ("net = SimpleDLA()\n", "net = LeNet()\n"),
)
STEPS = 10  # two steps an epoch, each epoch forking DataLoader workers
