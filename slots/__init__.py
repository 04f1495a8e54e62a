"""Slot declaration, creation and accounting: :mod:`optimizers.slots`, under its own name.

The implementation lives inside ``optimizers``, so ``import optimizers`` works even where another
project named ``slots`` has replaced this folder; this module only re-exports it.

>>> import optimizers.slots
>>> SlotSpec is optimizers.slots.SlotSpec
True
"""

from optimizers.slots import SlotSpec, as_slot_specs, create_slots, get_slots, slot_memory

__all__ = ["SlotSpec", "as_slot_specs", "create_slots", "get_slots", "slot_memory"]
