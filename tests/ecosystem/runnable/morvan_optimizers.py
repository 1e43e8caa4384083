"""MorvanZhou/PyTorch-Tutorial 306: four networks, four optimizers, one loop."""

REPO = "MorvanZhou/PyTorch-Tutorial"
PATH = "tutorial-contents/306_optimizer.py"
# numpy is not installed here: the plots take tensors, the history Python floats.
EDITS = (
    ("plt.scatter(x.numpy(), y.numpy())", "plt.scatter(x, y)"),
    ("l_his.append(loss.data.numpy())", "l_his.append(loss.item())"),
)
# Four networks take turns in one loop and share the rewrite's GradScaler: the
# step it skips (one network's, while it lowers its scale) shifts that network's
# losses against the others', which verify's loss-per-update comparison cannot
# tell apart; 6.7 % measured on float16, 0.0 % on bfloat16.
RTOL = 0.1
