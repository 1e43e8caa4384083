"""Lightning-AI/pytorch-lightning examples/fabric: the plain-PyTorch DCGAN
(Fabric's starting point) on CelebA (the stub's 256 faces), with narrow
networks and small batches."""

REPO = "Lightning-AI/pytorch-lightning"
PATH = "examples/fabric/dcgan/train_torch.py"
EDITS = (
    # Speed: a worker a core forks dozens of processes on a large machine.
    ("workers = os.cpu_count()\n", "workers = 2\n"),
    # Speed: 16 images a batch (16 batches an epoch of the stub's 256).
    ("batch_size = 128\n", "batch_size = 16\n"),
    # Speed: 8 filters where 64 take seconds a step on one core.
    ("ngf = 64\n", "ngf = 8\n"),
    ("ndf = 64\n", "ndf = 8\n"),
)
STEPS = 12  # iterations (a discriminator step and a generator step count as one)
# The discriminator ends in nn.Sigmoid and trains with nn.BCELoss: amplint
# declines float16 (the CUDA default's dtype too) and says why.
_FINDING = "takes probabilities"
DECLINED = {"default": _FINDING, "fp16": _FINDING}
