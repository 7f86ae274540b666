"""Compiler artifacts: a DCI per graph input/output and a SuperDSC-like record per kernel.

* ``dci``: the DataConversionInfo of one transfer, from the layout's DMA program
  (``dma_program``): ``dcsi`` lists the first nest's dims innermost first, each with
  ``size_``, ``stride_src_``, ``stride_dst_``, ``offset_src_``, ``offset_dst_`` (the
  nest's offsets ride on the innermost entry); ``pieces`` holds every nest so (a padded
  layout needs one per partial tile). Inputs move host to device, outputs device to host.
* ``sdsc``: one kernel: its op, the labeled data structures of its inputs and outputs
  (``device_size``, ``stride_map``, data format, stick dim) and a work division over
  the 32 cores: output device dims, largest first (the stick dim counted in sticks),
  each split by the largest divisor of its size that the cores left allow;
  ``coreIdToWkSlice_`` maps every core to its slice, the first split dim fastest.
"""

from __future__ import annotations

import math
from typing import Any

from ..core.dtypes import data_format
from ..core.layout import DeviceLayout
from ..dma import dma_program

CORES = 32


def _format(layout: DeviceLayout) -> str:
    try:
        return data_format(layout.dtype).name
    except (ValueError, TypeError, KeyError):
        return str(layout.dtype)


def _dcsi(nest: Any, h2d: bool) -> list[dict[str, int]]:
    src, dst = (nest.host_strides, nest.device_strides) if h2d else (nest.device_strides, nest.host_strides)
    src_off, dst_off = (nest.host_offset, nest.device_offset) if h2d else (nest.device_offset, nest.host_offset)
    entries = []
    for i in range(len(nest.ranges) - 1, -1, -1):
        inner = i == len(nest.ranges) - 1
        entries.append({"size_": nest.ranges[i], "stride_src_": src[i], "stride_dst_": dst[i],
                        "offset_src_": src_off if inner else 0, "offset_dst_": dst_off if inner else 0})
    return entries


def dci(name: str, layout: DeviceLayout, host_size: tuple[int, ...], host_stride: tuple[int, ...] | None,
        direction: str) -> dict[str, Any]:
    """The DCI of moving graph value ``name`` between the host and ``layout``."""
    program = dma_program(layout, host_size, host_stride, direction=direction)
    h2d = direction == "h2d"
    fmt = _format(layout)
    pieces = [_dcsi(n, h2d) for n in program.nests]
    return {
        "dci_dsName_": f"DCI-{name}",
        "name": name,
        "direction": direction,
        "isHostToSen_": h2d,
        "dataformat_src_": str(layout.dtype) if h2d else fmt,
        "dataformat_dst_": fmt if h2d else str(layout.dtype),
        "input_shape_": list(program.host_size) if h2d else list(layout.device_size),
        "output_shape_": list(layout.device_size) if h2d else list(program.host_size),
        "host_stride": list(program.host_stride),
        "dcsi": pieces[0] if pieces else [],
        "pieces": pieces,
        "padding": [{"sizes": list(f.ranges), "strides": list(f.strides), "offset": f.offset}
                    for f in program.padding],
        "nbytes": program.nbytes,
    }


def labeled_ds(index: int, name: str, kind: str, layout: DeviceLayout, stick: object) -> dict[str, Any]:
    return {
        "ldsIdx_": index,
        "dsName_": name,
        "dsType_": kind,
        "dataFormat_": _format(layout),
        "wordLength": layout.element_size,
        "device_size": list(layout.device_size),
        "stride_map": list(layout.stride_map),
        "stickDim_": stick if isinstance(stick, int) else str(stick),
        "nbytes": layout.nbytes,
        "memOrg_": {"hbm": {"isPresent": 1}, "lx": {"isPresent": 0}},
    }


def work_division(layout: DeviceLayout, cores: int = CORES) -> dict[str, Any]:
    """Split the output's device dims (all but the elements of a stick) over the cores."""
    dims = list(layout.device_size[:-1]) or [1]
    order = sorted(range(len(dims)), key=lambda d: -dims[d])
    splits = [1] * len(dims)
    left = cores
    for d in order:
        best = max((k for k in range(1, min(left, dims[d]) + 1) if dims[d] % k == 0), default=1)
        splits[d] = best
        left //= best
        if left == 1:
            break
    used = math.prod(splits)
    names = [f"d{d}" for d in range(len(dims))]
    slices: dict[str, dict[str, int]] = {}
    for core in range(used):
        rest, slot = core, {}
        for d in range(len(dims)):
            slot[names[d]] = rest % splits[d]
            rest //= splits[d]
        slices[str(core)] = slot
    return {
        "numCoresUsed_": used,
        "numWkSlicesPerDim_": dict(zip(names, splits)),
        "sliceSizePerDim_": {n: dims[d] // splits[d] for d, n in enumerate(names)},
        "coreIdToWkSlice_": slices,
    }


def sdsc(index: int, name: str, op: str, inputs: list[tuple[str, DeviceLayout, object]],
         outputs: list[tuple[str, DeviceLayout, object]]) -> dict[str, Any]:
    """The SuperDSC-like record of one kernel."""
    lds = [labeled_ds(i, n, "INPUT", layout, stick) for i, (n, layout, stick) in enumerate(inputs)]
    lds += [labeled_ds(len(inputs) + i, n, "OUTPUT", layout, stick) for i, (n, layout, stick) in enumerate(outputs)]
    return {
        "key": f"{index}_{op}",
        "name": name,
        "op": op,
        "inputs": lds[:len(inputs)],
        "outputs": lds[len(inputs):],
        "work_division": work_division(outputs[0][1]) if outputs else work_division(inputs[0][1]),
    }
