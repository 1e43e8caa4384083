"""karpathy/minGPT adder: a GPT learning two-digit additions (its own data)."""

REPO = "karpathy/minGPT"
PATH = "projects/adder/adder.py"
# The config overrides the script takes: a small batch, no DataLoader workers.
ARGV = ("--trainer.batch_size=16", "--trainer.num_workers=0")
# The mingpt package is the repository's own, imported from its root (two levels up).
ENV = {"PYTHONPATH": "../.."}
STEPS = 10
# The training step is in the trainer the script drives.
REWRITE = ("mingpt/trainer.py",)
