"""apex's op lists, edited by a script, migrated to torch.autocast.

apex's O1 chose each op's dtype from lists a script could edit: NVIDIA's
Tacotron 2 ran ``amp.lists.functional_overrides.FP32_FUNCS.remove("softmax")``
and ``FP16_FUNCS.append("softmax")`` to run softmax in float16.  torch.autocast's
lists are compiled into torch and cannot be edited, so the edit goes; what is
said instead is what autocast does with each op named.  The fix stays safe only
where autocast already does what the edit asked.
"""

from __future__ import annotations

import libcst as cst

from amplint.analysis.apex import ApexUse
from amplint.analysis.statements import positional_args, string_value
from amplint.transforms.apex.common import MigrationBlocked

# torch.autocast's CUDA lists ("CUDA Ops that can autocast to float16 / float32"
# in torch.amp's docs); any other op runs in the dtype of its inputs.
AUTOCAST_FLOAT16 = frozenset(
    "__matmul__ addbmm addmm addmv addr baddbmm bmm chain_matmul multi_dot conv1d conv2d "
    "conv3d conv_transpose1d conv_transpose2d conv_transpose3d GRUCell linear LSTMCell "
    "matmul mm mv prelu RNNCell einsum".split()
)
AUTOCAST_FLOAT32 = frozenset(
    "__pow__ __rdiv__ __rpow__ __rtruediv__ acos asin binary_cross_entropy_with_logits cosh "
    "cosine_embedding_loss cdist cosine_similarity cross_entropy cumprod cumsum dist erfinv "
    "exp expm1 group_norm hinge_embedding_loss kl_div l1_loss layer_norm log log_softmax "
    "log10 log1p log2 margin_ranking_loss mse_loss multilabel_margin_loss multi_margin_loss "
    "nll_loss norm normalize pdist poisson_nll_loss pow prod reciprocal rsqrt sinh "
    "smooth_l1_loss soft_margin_loss softmax softmin softplus sum renorm tan "
    "triplet_margin_loss".split()
)
# apex's lists, by the dtype they forced.
_LIST_DTYPES = {"FP16_FUNCS": "float16", "FP32_FUNCS": "float32"}
_ADDS = {"append", "extend", "insert"}


def autocast_dtype(op: str) -> str | None:
    """The dtype CUDA autocast runs `op` in; None where it follows the inputs."""
    if op in AUTOCAST_FLOAT16:
        return "float16"
    if op in AUTOCAST_FLOAT32:
        return "float32"
    return None


def list_edit_changes(use: ApexUse, code: str) -> list[str]:
    """What autocast does differently from `use`, an edit of one of apex's op
    lists made as a statement of its own (which the migration removes); empty
    where autocast already does what the edit asked.  Raises MigrationBlocked
    for any other use of `amp.lists`."""
    parts = use.member.split(".")  # lists, functional_overrides, FP16_FUNCS, append
    statement = use.statement
    if not (
        use.call is not None
        and len(parts) == 4
        and parts[2] in _LIST_DTYPES
        and (parts[3] in _ADDS or parts[3] == "remove")
        and isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and statement.body[0].value is use.call
    ):
        raise MigrationBlocked(f"`{code}` has no torch.amp counterpart amplint knows")
    ops = _ops_named(use.call)
    if ops is None:
        raise MigrationBlocked(f"`{code}` does not name its ops as strings")
    forced, adds = _LIST_DTYPES[parts[2]], parts[3] in _ADDS
    changes = []
    for op in ops:
        runs_in = autocast_dtype(op)
        if adds and runs_in == forced or not adds and runs_in != forced:
            continue  # autocast already does what the edit asked
        does = f"in {runs_in}" if runs_in else "in the dtype of its inputs"
        edit = f"forced it to {forced}" if adds else f"stopped forcing it to {forced}"
        changes.append(
            f"autocast runs `{op}` {does} (its op lists cannot be edited); apex's edit {edit}"
        )
    return changes


def _ops_named(call: cst.Call) -> list[str] | None:
    """The op names a list edit passes: `append("softmax")`, `extend(["a", "b"])`,
    `insert(0, "softmax")`; None when one is not a string literal."""
    positional = positional_args(call)
    if not positional:
        return None
    value = positional[-1].value
    elements = (
        [element.value for element in value.elements]
        if isinstance(value, (cst.List, cst.Tuple))
        else [value]
    )
    names = [string_value(element) for element in elements]
    return None if any(name is None for name in names) else names
