"""MorvanZhou/PyTorch-Tutorial 503: two regressions, one with dropout, trained
side by side in one loop; as is."""

REPO = "MorvanZhou/PyTorch-Tutorial"
PATH = "tutorial-contents/503_dropout.py"
# amplint declines both CPU settings: the search for `loss_drop`'s forward pass
# stops at `loss_ofit.backward()`, the other network's backward just above it.
DECLINED = {
    "bf16": "cannot find where `loss_drop` is computed",
    "fp16": "cannot find where `loss_drop` is computed",
}
