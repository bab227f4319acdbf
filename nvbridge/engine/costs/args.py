"""What recorded argument values mean, per op: the non-tensor parameters nvbridge.engine.costs.flops needs.

Values come as one JSON item per argument (the dataset's ``input_values``): nvbridge's emit_nvtx
writes them for the ops whose cost needs them (``values = [...]``, aten schema order, tensor
lists one item per tensor as ``sizes`` has them), NVIDIA PyProf's markers for every
``torch.nn.functional`` call (positional, or ``{"name": value}`` for a keyword). Each table
gives, per base op name, the position of its first non-tensor parameter and the parameters from
there in schema order (a tensor among them, such as a bias after a kernel size, is named and
ignored), with the defaults PyProf's left-out arguments take; aten ops record every argument, so
their defaults never apply.
"""

from __future__ import annotations

from typing import Any

from nvbridge.engine.costs.tables import base_name

Params = tuple[tuple[str, Any], ...]

_CONV_ND: Params = (("stride", 1), ("padding", 0), ("dilation", 1), ("groups", 1))
_CONV_T: Params = (("stride", 1), ("padding", 0), ("output_padding", 0), ("groups", 1), ("dilation", 1))
_CONV_ATEN: Params = (
    ("stride", None),
    ("padding", None),
    ("dilation", None),
    ("transposed", None),
    ("output_padding", None),
    ("groups", None),
)
# Backend convolutions (nested inside aten::convolution), each with its own order.
_PADDING_FIRST: Params = (("padding", None), ("stride", None), ("dilation", None), ("groups", None))
_PADDING_FIRST_T: Params = (
    ("padding", None),
    ("output_padding", None),
    ("stride", None),
    ("dilation", None),
    ("groups", None),
)
_KERNEL_SIZE: Params = (("kernel_size", None), ("bias", None), ("stride", None), ("padding", None), ("dilation", 1))
_KERNEL_SIZE_T: Params = (
    ("kernel_size", None),
    ("bias", None),
    ("stride", None),
    ("padding", None),
    ("output_padding", None),
    ("dilation", 1),
)
_CONV_BACKWARD: Params = (
    ("bias_sizes", None),
    ("stride", None),
    ("padding", None),
    ("dilation", None),
    ("transposed", None),
    ("output_padding", None),
    ("groups", None),
    ("output_mask", None),
)
_SCALED: Params = (("beta", 1), ("alpha", 1))

PARAMETERS: dict[str, tuple[int, Params]] = {
    **dict.fromkeys(("conv1d", "conv2d", "conv3d", "_convolution_mode"), (3, _CONV_ND)),
    **dict.fromkeys(("cudnn_convolution_relu",), (3, _CONV_ND)),
    "cudnn_convolution_add_relu": (5, _CONV_ND),  # (self, weight, z, alpha, bias, stride, ...)
    **dict.fromkeys(("conv_transpose1d", "conv_transpose2d", "conv_transpose3d"), (3, _CONV_T)),
    **dict.fromkeys(("convolution", "_convolution", "convolution_overrideable"), (3, _CONV_ATEN)),
    **dict.fromkeys(("mkldnn_convolution", "miopen_convolution", "miopen_depthwise_convolution"), (3, _PADDING_FIRST)),
    "_nnpack_spatial_convolution": (3, _PADDING_FIRST[:2]),
    "miopen_convolution_transpose": (3, _PADDING_FIRST_T),
    "cudnn_convolution": (2, _PADDING_FIRST),
    "cudnn_convolution_transpose": (2, _PADDING_FIRST_T),
    **dict.fromkeys(
        (
            "_slow_conv2d_forward",
            "thnn_conv2d",
            "slow_conv_dilated2d",
            "slow_conv_dilated3d",
            "_conv_depthwise2d",
            "conv_depthwise3d",
        ),
        (2, _KERNEL_SIZE),
    ),
    **dict.fromkeys(("slow_conv_transpose2d", "slow_conv_transpose3d"), (2, _KERNEL_SIZE_T)),
    "convolution_backward": (3, _CONV_BACKWARD),
    "einsum": (0, (("equation", None),)),
    **dict.fromkeys(("addmm", "baddbmm", "addbmm"), (3, _SCALED)),
}


def call_args(op_name: str, values: list[Any]) -> dict[str, Any]:
    """Named parameters from recorded argument values (``{"name": value}`` items by name, the
    others by position), defaults filled in; empty for ops whose cost needs none."""
    base, _ = base_name(op_name)
    first, params = PARAMETERS.get(base, (0, ()))
    out = {name: default for name, default in params if default is not None}
    for i, value in enumerate(values):
        if isinstance(value, dict):
            out.update(value)
        elif first <= i < first + len(params) and value is not None:
            out[params[i - first][0]] = value
    return out
