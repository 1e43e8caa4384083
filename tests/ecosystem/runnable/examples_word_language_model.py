"""pytorch/examples word_language_model: a small LSTM language model, trained by
its AdamW option (--use-optimizer), on a synthetic corpus in Wikitext-2's place."""

REPO = "pytorch/examples"
PATH = "word_language_model/main.py"
# Without --use-optimizer the script updates the weights by hand, which the
# verify harness (it counts optimizer steps) does not see as a step; AdamW
# wants a learning rate far below the hand update's 20.
ARGV = tuple(
    "--use-optimizer --lr 0.001 --epochs 1 --batch_size 10 --bptt 20 --emsize 32 --nhid 32"
    " --nlayers 1 --log-interval 4".split()
)

_WORDS = "the a model learns to predict next word from words before it in this text".split()


def _text(lines: int, offset: int) -> str:
    return "".join(
        " ".join(_WORDS[(line * 7 + column * 3 + offset) % len(_WORDS)] for column in range(12))
        + "\n"
        for line in range(lines)
    )


# Wikitext-2's place (the clone has no data): 200 lines of 13 tokens make 13
# batches of 10 x 20; validation and test take 40 lines each.
FILES = {
    "word_language_model/data/wikitext-2/train.txt": _text(200, 0),
    "word_language_model/data/wikitext-2/valid.txt": _text(40, 1),
    "word_language_model/data/wikitext-2/test.txt": _text(40, 2),
}
STEPS = 10
# The script's default path (no --use-optimizer) updates parameters by hand:
# amplint declines every setting for the script as written, and says why.
_FINDING = "updated by hand"
DECLINED = {"default": _FINDING, "bf16": _FINDING, "fp16": _FINDING}
