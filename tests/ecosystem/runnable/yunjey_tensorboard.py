"""yunjey/pytorch-tutorial: a two-layer network on MNIST (the stub's), logged to
TensorBoard through the tutorial's logger.py, which is left out."""

REPO = "yunjey/pytorch-tutorial"
PATH = "tutorials/04-utils/tensorboard/main.py"
EDITS = (
    # logger.py writes summaries with TensorFlow (and scipy.misc), not installed
    # here: a logger that writes nothing (it is called every 100 steps).
    (
        "from logger import Logger\n",
        "class Logger:\n"
        "    def __init__(self, log_dir):\n"
        "        pass\n"
        "    def __getattr__(self, name):\n"
        "        return lambda *args: None\n",
    ),
)
STEPS = 20
