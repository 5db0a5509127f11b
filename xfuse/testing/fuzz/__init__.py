"""
Differential fuzzing of the whole compiler, in the style of NNSmith: random torch programs,
each run in torch eager and through xfuse, compared.

    program = generate(seed=7)               # a `FuzzProgram`: source text + its parts
    outcome = check_source(program.source)   # eager vs every stage of xfuse
    outcome.status                           # "pass" | "fail" | "skip"

A program is Python source: `def program(x0, x1, ...)` whose body is one statement per op, and
`def make_inputs()` that builds seeded inputs (some transposed, expanded (stride 0) or strided
slices). The generator picks ops from what xfuse supports (elementwise with broadcasting,
comparisons and `where`, casts, reductions, normalisations, layout ops, matmul/linear) and some
it does not (flip, sort, conv1d, ...), in-place ops and views of mutated tensors. Each
candidate statement is run on the real inputs before it is kept, so a program never computes
NaN/Inf or huge values (the op's domain is respected by construction).

The differential runner (`check_source`) compares eager with: the interpreter after import and
after each pass of the pipeline, the CPU backend through `xfuse.compile` (called twice: the
second call reuses buffers; the first with every buffer between guard bands, so that a kernel
writing past its output fails at "cpu (bounds)" instead of corrupting the heap,
`xfuse.testing.guarded`), and CUDA when there is one. Tolerance: `torch.testing.assert_close`
defaults; for programs with reductions, matmuls or low precision, an output that fails those
passes when its RMSE against an f64 run is at most 2x eager's plus a floor of a few ulps of
its magnitude (`compare._rmse_ok` explains the rule).

The training mode (`xfuse-fuzz --training`, `training.check_training`) runs each program's
forward and backward through `torch.compile(backend="xfuse")` in strict mode and compares its
outputs and input gradients with eager's; a gradient that fails the RMSE rule is judged again
with its errors pooled over more losses (`compare.pooled_rmse_ok`: a 0-d gradient's one error
is a single random draw, eager's too).

The dynamic-shapes mode (`xfuse-fuzz --dynamic`, `dynamic.check_dynamic`) calls each program
at its inputs' sizes and two other sizes of one dim through `torch.compile(backend="xfuse",
dynamic=True)` and compares values and strides with eager's at each.

Both together (`xfuse-fuzz --training --dynamic`, `dynamic_training.check_dynamic_training`)
train each program at those sizes through `torch.compile(backend="xfuse", dynamic=True)`, its
outputs and input gradients compared with eager's at each size as the training mode compares
them, and say how each part (forward, backward) compiled: symbolically once, or per shape.

One module per part: `program.py` (program text), `generator.py`, `draw_order.py` (the order
each pool draws its ops in), `compare.py`, `runner.py` (the differential runner, and the
`--semantics` aliasing check), `training.py` (the training mode), `dynamic.py` (the
dynamic-shapes mode), `dynamic_training.py` (both), `reproducer.py`; this package names what
they export.
"""
