"""DMA programs: loop nests generated from a layout, and their execution."""

from .execute import execute
from .program import DmaProgram, Nest, dma_program

__all__ = ["DmaProgram", "Nest", "dma_program", "execute"]
