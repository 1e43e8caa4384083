"""pytorch/examples mnist_hogwild: Hogwild training on MNIST (the stub's), one
process, its step in train.py."""

REPO = "pytorch/examples"
PATH = "mnist_hogwild/main.py"
ARGV = ("--epochs", "1", "--batch-size", "32", "--num-processes", "1", "--log-interval", "4")
EDITS = (
    # The harness counts steps in its own process: the one worker runs in it.
    ("        p.start()\n        processes.append(p)\n", "        p.run()\n"),
)
STEPS = 8
# The training step is in the module main.py starts its workers on.
REWRITE = ("mnist_hogwild/train.py",)
