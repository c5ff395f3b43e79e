"""A tensor-parallel MLP in JAX, partitioned by GSPMD from the input shardings alone.

fc1 is column-parallel (w1 and b1 sharded on the output features), fc2 row-parallel (w2 sharded on its input
features, b2 replicated): XLA's SPMD partitioner inserts the all-reduce after fc2. No hand-written relation:
the PartitionSpecs are the input relation.
"""
import jax
from jax.sharding import PartitionSpec as P

HIDDEN, FFN, BATCH = 8, 32, 4


def mlp(x, w1, b1, w2, b2):
    h = jax.nn.gelu(x @ w1 + b1)
    return jax.nn.gelu(h @ w2 + b2)


def spec():
    return mlp


def inputs():
    k = jax.random.split(jax.random.key(0), 5)
    return (jax.random.normal(k[0], (BATCH, HIDDEN)), jax.random.normal(k[1], (HIDDEN, FFN)),
            jax.random.normal(k[2], (FFN,)), jax.random.normal(k[3], (FFN, HIDDEN)), jax.random.normal(k[4], (HIDDEN,)))


def in_specs(world):
    return (P(), P(None, "tp"), P("tp"), P("tp", None), P())


def _cat(name, world, dim):
    return f"concat({', '.join(f'{name}@{r}' for r in range(world))}, dim={dim})"


def expect(world, backward):
    rel = {"out0": "out0@0"}  # the result, replicated
    if backward:  # then the gradients of x, w1, b1, w2, b2, laid out like them
        rel.update({"out1": "out1@0", "out2": _cat("out2", world, 1), "out3": _cat("out3", world, 0),
                    "out4": _cat("out4", world, 0), "out5": "out5@0"})
    return rel
