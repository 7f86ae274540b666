"""The family protocol: a toy family added in a few lines works in ``to()``, ``show``, pictures and ``torch.load``.

The toy family stores a 2-D tensor column tile by column tile: tiles of ``T`` columns,
device ``[ceil(W / T)][H][T]``; the tiles of the last column hold padding.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import pytest
import torch

import torch_layouts
from torch_layouts import DeviceLayout, LayoutTemplate, viz
from torch_layouts.cli import main
from torch_layouts.core import family


F32 = torch.float32


class ToyLayout(DeviceLayout):
    __slots__ = ()


@dataclass(frozen=True)
class ToyTiles(LayoutTemplate):
    tile: int

    def bind(self, host_size: Sequence[int], dtype: torch.dtype) -> ToyLayout:
        h, w = host_size
        return ToyLayout([-(-w // self.tile), h, self.tile], [self.tile, w, 1], dtype, host_size=host_size)


TOY = family.Family(name="toy", layout_types=(ToyLayout,), safe_classes=(ToyTiles,),
                    build=lambda notation, size, dtype, pad, order: ToyTiles(int(notation)).bind(size, dtype or F32),
                    specs=(("toy:T", "column tiles of T"),), example="toy:4", logical_dims="HW",
                    chunk_name=lambda layout: "tile row", facts=lambda layout: [("tiles", str(layout.device_size[0]))])


@pytest.fixture
def toy() -> family.Family:
    family.register(TOY)
    yield TOY
    family.unregister("toy")


def expected_memory(x: torch.Tensor, tile: int) -> torch.Tensor:
    """The toy layout from its definition: device[t][r][k] = x[r][t*tile + k], zero past the last column."""
    h, w = x.shape
    padded = torch.zeros(h, -(-w // tile) * tile, dtype=x.dtype)
    padded[:, :w] = x
    return padded.view(h, -1, tile).transpose(0, 1).reshape(-1)


def test_toy_family_works_in_to_and_relayouts(toy: family.Family) -> None:
    x = torch.randn(5, 10)
    y = x.to("spyre", device_layout=ToyTiles(4))
    assert isinstance(y.device_tensor_layout(), ToyLayout)
    assert torch.equal(torch_layouts.device_memory(y), expected_memory(x, 4))
    assert torch.equal(y.cpu(), x)
    z = y.to("spyre", device_layout=torch_layouts.onednn.MemoryFormat("ba")).to("spyre", device_layout=ToyTiles(3))
    assert torch.equal(torch_layouts.device_memory(z), expected_memory(x, 3))
    assert family.of(y.device_tensor_layout()) is toy


def test_toy_family_works_in_show(toy: family.Family, capsys: pytest.CaptureFixture) -> None:
    assert main(["show", "toy:4", "--shape", "2,6", "--rows", "0", "--cols", "0"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"device_size\s+\[2, 2, 4\]", out) and re.search(r"\ntiles\s+2\n", out)
    assert re.search(r"\[1,1\]\s+10\s+11\s+pad\s+pad\n", out)  # tile 1 of row 1: columns 4, 5 of host row 1
    with pytest.raises(SystemExit):
        main(["show", "--help"])
    assert "toy:T" in capsys.readouterr().out


def test_toy_family_works_in_pictures_and_torch_load(toy: family.Family, tmp_path) -> None:
    layout = ToyTiles(4).bind((3, 6), torch.float32)
    fig = viz.draw(layout, tmp_path / "toy.png", dpi=30)
    labels = [text.get_text() for text in fig.legends[0].get_texts()]
    assert labels[0] == "tile row 0" and labels[-1].startswith("padding")
    y = torch.randn(3, 6).to("spyre", device_layout=ToyTiles(4))
    buffer = io.BytesIO()
    torch.save(y, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)
    assert loaded.device_tensor_layout() == layout and torch.equal(loaded.cpu(), y.cpu())


def test_unknown_and_clashing_families_are_rejected() -> None:
    assert family.lookup("toy") is None
    assert main(["show", "toy:4", "--shape", "2,6"]) == 2
    with pytest.raises(ValueError, match="'tensorrt' is already taken by family 'trt'"):
        family.register(family.Family(name="x", aliases=("tensorrt",), layout_types=(), build=TOY.build,
                                      specs=(), example="x", logical_dims="any"))
    with pytest.raises(KeyError, match="toy"):
        family.unregister("toy")
    with pytest.raises(TypeError, match="register takes a Family"):
        family.register("toy")


def test_every_builtin_family_is_registered_and_owns_its_layouts() -> None:
    names = {f.name for f in family.families()}
    assert {"spyre", "htp", "trt", "mace", "onednn"} <= names
    cases = {
        "spyre": torch_layouts.SpyreTensorLayout((3, 5), torch.float16),
        "htp": torch_layouts.htp.R4CroutonLayout.bind((1, 2, 3, 4), torch.float32),
        "trt": torch_layouts.tensorrt.TensorFormat.kCHW4.bind((1, 6, 2, 3), torch.float16),
        "mace": torch_layouts.mace.CpuLayout.CPU_NCHW.bind((1, 2, 3, 4), torch.float32),
        "onednn": torch_layouts.onednn.MemoryFormat("nChw8c").bind((1, 3, 2, 2), torch.float32),
    }
    for name, layout in cases.items():
        assert family.of(layout).name == name
        assert family.lookup(name).build is not None and math.prod(layout.device_size) > 0
    assert family.of(DeviceLayout([4], [1], torch.float32)) is None
