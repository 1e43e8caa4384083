"""pytorch/examples dcgan: its own --dataset fake (the stub's FakeData), with
narrow networks (8 filters, a 16-wide latent) at the 64-pixel size its layers
are built for."""

REPO = "pytorch/examples"
PATH = "dcgan/main.py"
ARGV = tuple(
    "--dataset fake --workers 0 --batchSize 8 --imageSize 64 --nz 16 --ngf 8 --ndf 8"
    " --niter 1 --manualSeed 1".split()
)
STEPS = 20  # iterations (a discriminator step and a generator step count as one)
# The discriminator ends in nn.Sigmoid and trains with nn.BCELoss: amplint
# declines float16 (the CUDA default's dtype too) and says why.
_FINDING = "takes probabilities"
DECLINED = {"default": _FINDING, "fp16": _FINDING}
