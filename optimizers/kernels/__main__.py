"""``python -m optimizers.kernels``: build the fused kernels now (as the first step would) and print
where they are cached."""

from optimizers.kernels import build

print(build())
