"""yunjey/pytorch-tutorial: an LSTM language model, on a synthetic corpus."""

REPO = "yunjey/pytorch-tutorial"
PATH = "tutorials/02-intermediate/language_model/main.py"
# numpy (not installed here) serves only to print the perplexity.
EDITS = (("import numpy as np\n", "import math as np\n"),)

_WORDS = "the a model learns to predict next word from words before it in this text".split()
_LINES = (
    " ".join(_WORDS[(line * 7 + column * 3) % len(_WORDS)] for column in range(12))
    for line in range(500)
)
# Penn Treebank's place; 500 lines of 13 tokens make 10 batches of 20 x 30.
FILES = {
    "tutorials/02-intermediate/language_model/data/train.txt": "\n".join(_LINES) + "\n",
}
STEPS = 10  # a seventh of a second a step on one core
# This CPU has no float16 LSTM kernel (oneDNN: "could not create a primitive
# descriptor"); amplint declines float16 on the CPU for recurrent layers.
DECLINED = {"fp16": "has no float16 kernel on most CPUs"}
