"""The CPU backend on hand-written loop IR (docs/contracts.md): results equal torch's."""

from __future__ import annotations

import pytest
import torch

import xfuse
from xfuse.backends.cpu import CPUBackend
from xfuse.backends.threadpool import RangePool, split_range
from xfuse.errors import CodegenError
from xfuse.ir.context import parse


def parallel(bounds: list[int], ivs: list[str], body: str) -> str:
    """An `scf.parallel` from 0 by 1 to `bounds` (xDSL 0.74 prints it in generic form)."""
    n = len(bounds)
    consts = "\n".join(f"    %ub{i} = arith.constant {b} : index" for i, b in enumerate(bounds))
    operands = ", ".join(["%c0"] * n + [f"%ub{i}" for i in range(n)] + ["%c1"] * n)
    types = ", ".join(["index"] * (3 * n))
    args = ", ".join(f"%{iv}: index" for iv in ivs)
    return f"""    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
{consts}
    "scf.parallel"({operands}) <{{operandSegmentSizes = array<i32: {n}, {n}, {n}, 0>}}> ({{
    ^bb0({args}):
{body}
      scf.reduce
    }}) : ({types}) -> ()"""


def kernel(name: str, args: list[tuple[str, str]], body: str, parallel_dims: int = 1) -> str:
    signature = ", ".join(f"%{n}: {t}" for n, t in args)
    return f"""  func.func @{name}({signature}) attributes {{xfuse.kernel, xfuse.parallel_dims = {parallel_dims} : i64}} {{
{body}
    func.return
  }}"""


def module(*functions: str) -> str:
    return "builtin.module {\n" + "\n".join(functions) + "\n}\n"


def unary_f32(op: str, n: int) -> str:
    """out[i] = op(x[i]) over n f32 elements."""
    body = f"""      %a = memref.load %x[%i] : memref<{n}xf32>
      %e = {op} %a : f32
      memref.store %e, %out[%i] : memref<{n}xf32>"""
    return module(
        kernel(
            "k",
            [("x", f"memref<{n}xf32>"), ("out", f"memref<{n}xf32>")],
            parallel([n], ["i"], body),
        )
    )


def gelu_sigmoid(rows: int, cols: int) -> str:
    """gelu(x * w + b) * sigmoid(x), w and b per column (erf gelu, sigmoid = 1 / (1 + exp(-x)))."""
    m = f"memref<{rows}x{cols}xf32>"
    v = f"memref<{cols}xf32>"
    body = f"""      %x0 = memref.load %x[%i, %j] : {m}
      %w0 = memref.load %w[%j] : {v}
      %b0 = memref.load %b[%j] : {v}
      %xw = arith.mulf %x0, %w0 : f32
      %y = arith.addf %xw, %b0 : f32
      %half = arith.constant 0.5 : f32
      %one = arith.constant 1.0 : f32
      %rsqrt2 = arith.constant 0.70710678118654752 : f32
      %ys = arith.mulf %y, %rsqrt2 : f32
      %erf = math.erf %ys : f32
      %erf1 = arith.addf %erf, %one : f32
      %hy = arith.mulf %y, %half : f32
      %gelu = arith.mulf %hy, %erf1 : f32
      %nx = arith.negf %x0 : f32
      %ex = math.exp %nx : f32
      %den = arith.addf %ex, %one : f32
      %sig = arith.divf %one, %den : f32
      %r = arith.mulf %gelu, %sig : f32
      memref.store %r, %out[%i, %j] : {m}"""
    return module(
        kernel(
            "gelu_sigmoid",
            [("x", m), ("w", v), ("b", v), ("out", m)],
            parallel([rows, cols], ["i", "j"], body),
            parallel_dims=2,
        )
    )


def dtypes_kernel(n: int) -> str:
    """One kernel that loads and stores every element type of the contract."""
    args = [
        ("h", f"memref<{n}xf16>"),
        ("bf", f"memref<{n}xbf16>"),
        ("d", f"memref<{n}xf64>"),
        ("a", f"memref<{n}xi32>"),
        ("l", f"memref<{n}xi64>"),
        ("m", f"memref<{n}xi1>"),
        ("f", f"memref<{n}xf32>"),
        ("out_h", f"memref<{n}xf16>"),
        ("out_bf", f"memref<{n}xbf16>"),
        ("out_d", f"memref<{n}xf64>"),
        ("out_a", f"memref<{n}xi32>"),
        ("out_l", f"memref<{n}xi64>"),
        ("out_m", f"memref<{n}xi1>"),
        ("out_f", f"memref<{n}xf32>"),
    ]
    body = f"""      %h0 = memref.load %h[%i] : memref<{n}xf16>
      %bf0 = memref.load %bf[%i] : memref<{n}xbf16>
      %d0 = memref.load %d[%i] : memref<{n}xf64>
      %a0 = memref.load %a[%i] : memref<{n}xi32>
      %l0 = memref.load %l[%i] : memref<{n}xi64>
      %m0 = memref.load %m[%i] : memref<{n}xi1>
      %f0 = memref.load %f[%i] : memref<{n}xf32>
      %h2 = arith.mulf %h0, %h0 : f16
      %h3 = arith.addf %h2, %h0 : f16
      %h4 = math.tanh %h3 : f16
      memref.store %h4, %out_h[%i] : memref<{n}xf16>
      %bfw = arith.extf %bf0 : bf16 to f32
      %bfe = math.exp %bfw : f32
      %bfs = arith.addf %bfe, %f0 : f32
      %bfo = arith.truncf %bfs : f32 to bf16
      %two = arith.constant 2.0 : bf16
      %bfo2 = arith.mulf %bfo, %two : bf16
      memref.store %bfo2, %out_bf[%i] : memref<{n}xbf16>
      %de = math.exp %d0 : f64
      %dl = math.log1p %de : f64
      %dm = arith.maximumf %dl, %d0 : f64
      memref.store %dm, %out_d[%i] : memref<{n}xf64>
      %seven = arith.constant 7 : i32
      %ar = arith.floordivsi %a0, %seven : i32
      %am = arith.maxsi %ar, %a0 : i32
      %ax = arith.xori %am, %seven : i32
      %asel = arith.select %m0, %ax, %a0 : i32
      memref.store %asel, %out_a[%i] : memref<{n}xi32>
      %ae = arith.extsi %a0 : i32 to i64
      %lm = arith.muli %l0, %ae : i64
      %lr = arith.remsi %lm, %l0 : i64
      %ls = arith.subi %lm, %lr : i64
      memref.store %ls, %out_l[%i] : memref<{n}xi64>
      %zero = arith.constant 0.0 : f32
      %pos = arith.cmpf ogt, %f0, %zero : f32
      %mx = arith.andi %pos, %m0 : i1
      memref.store %mx, %out_m[%i] : memref<{n}xi1>
      %af = arith.sitofp %a0 : i32 to f32
      %hf = arith.extf %h0 : f16 to f32
      %mf = arith.uitofp %m0 : i1 to f32
      %s1 = arith.addf %af, %hf : f32
      %s2 = arith.addf %s1, %mf : f32
      %fl = math.floor %f0 : f32
      %fi = arith.fptosi %fl : f32 to i32
      %fif = arith.sitofp %fi : i32 to f32
      %s3 = arith.addf %s2, %fif : f32
      %dt = arith.truncf %d0 : f64 to f32
      %s4 = arith.addf %s3, %dt : f32
      memref.store %s4, %out_f[%i] : memref<{n}xf32>"""
    return module(kernel("dtypes", args, parallel([n], ["i"], body)))


def row_sum_kernel(rows: int, cols: int) -> str:
    """out[i] = sum_j x[i, j] (bf16 input, f32 accumulator) and the row max in f32."""
    m = f"memref<{rows}x{cols}xbf16>"
    body = f"""      %cols = arith.constant {cols} : index
      %zero = arith.constant 0.0 : f32
      %ninf = arith.constant 0xFF800000 : f32
      %s, %mx = scf.for %j = %c0 to %cols step %c1 iter_args(%acc = %zero, %best = %ninf) -> (f32, f32) {{
        %v = memref.load %x[%i, %j] : {m}
        %vf = arith.extf %v : bf16 to f32
        %acc2 = arith.addf %acc, %vf : f32
        %best2 = arith.maximumf %best, %vf : f32
        scf.yield %acc2, %best2 : f32, f32
      }}
      memref.store %s, %sum[%i] : memref<{rows}xf32>
      memref.store %mx, %max[%i] : memref<{rows}xf32>"""
    args = [("x", m), ("sum", f"memref<{rows}xf32>"), ("max", f"memref<{rows}xf32>")]
    return module(kernel("row_sum", args, parallel([rows], ["i"], body)))


def scratch_kernel(rows: int, cols: int) -> str:
    """Softmax of each row through a scratch row buffer (memref.alloca inside the loop)."""
    m = f"memref<{rows}x{cols}xf32>"
    body = f"""      %cols = arith.constant {cols} : index
      %zero = arith.constant 0.0 : f32
      %tmp = memref.alloca() : memref<{cols}xf32>
      %total = scf.for %j = %c0 to %cols step %c1 iter_args(%acc = %zero) -> (f32) {{
        %v = memref.load %x[%i, %j] : {m}
        %e = math.exp %v : f32
        memref.store %e, %tmp[%j] : memref<{cols}xf32>
        %acc2 = arith.addf %acc, %e : f32
        scf.yield %acc2 : f32
      }}
      scf.for %j = %c0 to %cols step %c1 {{
        %e = memref.load %tmp[%j] : memref<{cols}xf32>
        %p = arith.divf %e, %total : f32
        memref.store %p, %out[%i, %j] : {m}
        scf.yield
      }}"""
    return module(kernel("softmax", [("x", m), ("out", m)], parallel([rows], ["i"], body)))


@pytest.fixture(scope="module")
def backend() -> CPUBackend:
    return CPUBackend(pool=RangePool(threads=1))


def build(backend: CPUBackend, text: str, name: str):
    return backend.load(backend.compile(parse(text), name), name)


def test_target_names_the_host_cpu(backend: CPUBackend) -> None:
    import llvmlite.binding as llvm

    assert backend.target.startswith("cpu-")
    assert llvm.get_host_cpu_name() in backend.target


def test_vectors_are_of_full_width_with_avx512(backend: CPUBackend) -> None:
    """`FULL_WIDTH`: LLVM's tuning for Intel's AVX-512 cores would vectorize 8 wide in ymm
    registers; xfuse asks for 16 wide wherever the CPU has AVX-512 (and leaves others alone)."""
    import llvmlite.binding as llvm

    from xfuse.backends.llvm import FULL_WIDTH, host_cpu

    avx512 = "+avx512f" in llvm.get_host_cpu_features().flatten().split(",")
    assert (FULL_WIDTH in host_cpu()[1].split(",")) == avx512
    if not avx512:
        pytest.skip("no AVX-512 on this CPU")
    assembly = backend.assembly(parse(gelu_sigmoid(64, 256)), "gelu_sigmoid")
    assert "%zmm" in assembly


def test_pointwise_chain_with_broadcast(backend: CPUBackend) -> None:
    kernel_ = build(backend, gelu_sigmoid(33, 70), "gelu_sigmoid")
    x, w, b = torch.randn(33, 70), torch.randn(70), torch.randn(70)
    out = torch.empty(33, 70)
    kernel_([x, w, b, out])
    expected = torch.nn.functional.gelu(x * w + b) * torch.sigmoid(x)
    torch.testing.assert_close(out, expected)


def test_every_element_type(backend: CPUBackend) -> None:
    n = 257
    kernel_ = build(backend, dtypes_kernel(n), "dtypes")
    g = torch.Generator().manual_seed(1)
    h = torch.randn(n, generator=g).half()
    bf = torch.randn(n, generator=g).bfloat16()
    d = torch.randn(n, generator=g, dtype=torch.float64) * 3
    a = torch.randint(-1000, 1000, (n,), generator=g, dtype=torch.int32)
    lng = torch.randint(1, 1 << 20, (n,), generator=g, dtype=torch.int64)
    m = torch.rand(n, generator=g) > 0.5
    f = torch.randn(n, generator=g) * 10
    outs = [torch.empty(n, dtype=t.dtype) for t in (h, bf, d, a, lng, m, f)]
    kernel_([h, bf, d, a, lng, m, f, *outs])

    expected_h = torch.tanh(h * h + h)
    bfo = (bf.float().exp() + f).bfloat16()
    expected_bf = bfo * torch.tensor(2.0, dtype=torch.bfloat16)
    expected_d = torch.maximum(torch.log1p(torch.exp(d)), d)
    ar = torch.div(a, 7, rounding_mode="floor").to(torch.int32)
    expected_a = torch.where(m, torch.maximum(ar, a) ^ 7, a)
    lm = lng * a.long()
    expected_l = lm - torch.fmod(lm, lng)
    expected_m = (f > 0) & m
    expected_f = a.float() + h.float() + m.float() + f.floor().int().float() + d.float()
    for got, want in zip(
        outs,
        (expected_h, expected_bf, expected_d, expected_a, expected_l, expected_m, expected_f),
        strict=True,
    ):
        torch.testing.assert_close(got, want)


def test_bf16_rounding_matches_torch(backend: CPUBackend) -> None:
    # f32 values next to bf16 rounding ties, NaN and infinities: truncf rounds like torch.
    n = 4096
    kernel_ = build(backend, dtypes_kernel(n), "dtypes")
    bits = torch.randint(0, 1 << 16, (n,), dtype=torch.int32) | 0x3F800000
    f = bits.view(torch.float32)
    f[:4] = torch.tensor([float("nan"), float("inf"), -float("inf"), 3.3895314e38])
    bf = torch.full((n,), -200.0, dtype=torch.bfloat16)  # exp(-200) = 0: out_bf = 2 * bf16(f)
    ins = [
        torch.zeros(n).half(),
        bf,
        torch.zeros(n, dtype=torch.float64),
        torch.zeros(n, dtype=torch.int32),
        torch.ones(n, dtype=torch.int64),
        torch.zeros(n, dtype=torch.bool),
        f,
    ]
    outs = [torch.empty(n, dtype=t.dtype) for t in ins]
    kernel_([*ins, *outs])
    expected = f.bfloat16() * torch.tensor(2.0, dtype=torch.bfloat16)
    torch.testing.assert_close(outs[1], expected, equal_nan=True, rtol=0, atol=0)


def test_reduction_with_f32_accumulator(backend: CPUBackend) -> None:
    kernel_ = build(backend, row_sum_kernel(37, 300), "row_sum")
    x = torch.randn(37, 300).bfloat16()
    total, best = torch.empty(37), torch.empty(37)
    kernel_([x, total, best])
    reference = x.double().sum(dim=1)
    rmse = (total.double() - reference).pow(2).mean().sqrt()
    assert rmse < 1e-5
    torch.testing.assert_close(best, x.float().amax(dim=1))


def test_scratch_buffer_in_parallel_loop(backend: CPUBackend) -> None:
    kernel_ = build(backend, scratch_kernel(64, 129), "softmax")
    x = torch.randn(64, 129)
    out = torch.empty_like(x)
    kernel_([x, out])
    torch.testing.assert_close(out, torch.softmax(x, dim=1))


def test_threads_split_the_range_like_one_thread() -> None:
    text = gelu_sigmoid(515, 256)
    artifact = CPUBackend().compile(parse(text), "gelu_sigmoid")
    single = CPUBackend(pool=RangePool(threads=1)).load(artifact, "gelu_sigmoid")
    threaded = CPUBackend(pool=RangePool(threads=4, min_work=0)).load(artifact, "gelu_sigmoid")
    x, w, b = torch.randn(515, 256), torch.randn(256), torch.randn(256)
    out1, out4 = torch.empty(515, 256), torch.full((515, 256), float("nan"))
    single([x, w, b, out1])
    threaded([x, w, b, out4])
    assert torch.equal(out1, out4)


def channel_scale(channels: int, rows: int, cols: int) -> str:
    """out[c, i, j] = x[c, i, j] * (c + 1): each element's value shows the channel it took."""
    m = f"memref<{channels}x{rows}x{cols}xf32>"
    body = f"""      %v = memref.load %x[%c, %i, %j] : {m}
      %c64 = arith.index_cast %c : index to i64
      %cf = arith.sitofp %c64 : i64 to f32
      %one = arith.constant 1.0 : f32
      %s = arith.addf %cf, %one : f32
      %r = arith.mulf %v, %s : f32
      memref.store %r, %out[%c, %i, %j] : {m}"""
    return module(
        kernel(
            "k", [("x", m), ("out", m)], parallel([channels, rows, cols], ["c", "i", "j"], body), 3
        )
    )


def test_a_short_outer_dimension_splits_with_the_next_one() -> None:
    """A 3-channel image (an input pad's) is a range of 3 x 225 rows for the threads, not of 3
    channels that two threads would share 2:1; chunks then cut channels, and each row knows its
    channel and row."""
    artifact = CPUBackend().compile(parse(channel_scale(3, 225, 16)), "k")
    threaded = CPUBackend(pool=RangePool(threads=4, min_work=0)).load(artifact, "k")
    assert threaded.extent == 3 * 225
    x, out = torch.randn(3, 225, 16), torch.full((3, 225, 16), float("nan"))
    threaded([x, out])
    expected = x * torch.arange(1.0, 4.0).view(3, 1, 1)
    assert torch.equal(out, expected)
    threaded.pool.shutdown()
    for parts in (2, 7, 100, 675):  # chunks that start and end inside a channel
        out.fill_(float("nan"))
        for lo, hi in split_range(threaded.extent, parts):
            threaded.function(lo, hi, x.data_ptr(), out.data_ptr())
        assert torch.equal(out, expected)


def test_the_last_dimension_and_long_outer_ones_stay_loops(backend: CPUBackend) -> None:
    assert build(backend, channel_scale(3, 2, 300), "k").extent == 6
    assert build(backend, channel_scale(8, 2, 4), "k").extent == 8  # long enough alone
    assert build(backend, gelu_sigmoid(3, 256), "gelu_sigmoid").extent == 3  # the last stays


def test_split_range_covers_each_index_once() -> None:
    for extent, parts in [(1, 4), (10, 3), (7, 7), (5, 16), (1000, 6)]:
        chunks = split_range(extent, parts)
        covered = [i for lo, hi in chunks for i in range(lo, hi)]
        assert covered == list(range(extent))
        assert len(chunks) == min(extent, parts)


def test_range_pool_runs_small_work_on_the_caller() -> None:
    import threading

    seen: list[str] = []
    pool = RangePool(threads=4, min_work=1000)
    pool.run(lambda lo, hi: seen.append(threading.current_thread().name), extent=8, work=999)
    assert seen == [threading.current_thread().name]
    seen.clear()
    pool.run(lambda lo, hi: seen.append(threading.current_thread().name), extent=8, work=1000)
    assert len(seen) == 4
    pool.shutdown()


def test_the_plan_runs_small_ranges_inline_as_run_does() -> None:
    pool = RangePool(threads=4, min_work=1000)
    assert pool.plan(extent=8, work=999) is None
    assert pool.plan(extent=1, work=10**6) is None  # one row cannot be split
    assert pool.plan(extent=8, work=1000) == (4, 4)
    assert pool.plan(extent=0, work=0) is not None  # nothing to run at all
    assert RangePool(threads=1, min_work=0).plan(extent=8, work=10**6) is None


def test_small_kernel_runs_on_the_caller_and_large_one_threaded() -> None:
    artifact = CPUBackend().compile(parse(unary_f32("math.sqrt", 100)), "k")
    for min_work in (10**6, 0):  # inline launch, then the pool's chunks
        kernel_ = CPUBackend(pool=RangePool(threads=4, min_work=min_work)).load(artifact, "k")
        x, out = torch.rand(100), torch.empty(100)
        kernel_([x, out])
        torch.testing.assert_close(out, x.sqrt())
        kernel_.pool.shutdown()


def test_artifact_loads_in_a_fresh_backend() -> None:
    artifact = CPUBackend().compile(parse(unary_f32("math.sqrt", 100)), "k")
    assert isinstance(artifact, bytes) and artifact[:4] == b"\x7fELF"
    kernel_ = CPUBackend().load(bytes(artifact), "k")
    assert (kernel_.extent, kernel_.arity) == (100, 2)
    x, out = torch.rand(100), torch.empty(100)
    kernel_([x, out])
    torch.testing.assert_close(out, x.sqrt())


def test_wrong_buffer_count_is_an_error(backend: CPUBackend) -> None:
    kernel_ = build(backend, unary_f32("math.absf", 8), "k")
    with pytest.raises(ValueError, match="takes 2 buffers, got 1"):
        kernel_([torch.zeros(8)])


def test_missing_kernel_is_a_codegen_error(backend: CPUBackend) -> None:
    with pytest.raises(CodegenError, match="no function @nope"):
        backend.compile(parse(unary_f32("math.absf", 8)), "nope")


def test_unsupported_op_is_a_codegen_error(backend: CPUBackend) -> None:
    with pytest.raises(CodegenError, match="uitofp from i64"):
        text = unary_f32("math.absf", 8).replace(
            "%e = math.absf %a : f32",
            "%ai = arith.fptosi %a : f32 to i64\n      %e = arith.uitofp %ai : i64 to f32",
        )
        backend.compile(parse(text), "k")


def test_range_pool_balances_large_work_over_more_chunks() -> None:
    import threading

    from xfuse.backends.threadpool import BALANCE_FACTOR, CHUNKS_PER_THREAD

    lock = threading.Lock()
    seen: list[tuple[int, int]] = []

    def record(lo: int, hi: int) -> None:
        with lock:
            seen.append((lo, hi))

    pool = RangePool(threads=2, min_work=10)
    pool.run(record, extent=100, work=10 * BALANCE_FACTOR)
    assert len(seen) == 2 * CHUNKS_PER_THREAD
    assert sorted(i for lo, hi in seen for i in range(lo, hi)) == list(range(100))
    seen.clear()
    pool.run(record, extent=100, work=10 * BALANCE_FACTOR - 1)
    assert len(seen) == 2
    pool.shutdown()


def test_an_activation_beside_its_channel_sums_is_one_pass_of_eagers_values() -> None:
    """A squeeze-excitation's activation and its mean over each channel's image, channels-last:
    one kernel reads each element once, writing the activation as it sums (the activation
    reads no sum, so the reductions' loop writes it)."""
    x = torch.randn(2, 6, 5, 16).permute(0, 3, 1, 2)

    def fn(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.nn.functional.silu(t * 1.5 + 0.25)
        return y, y.mean((2, 3), keepdim=True)

    compiled = xfuse.compile(fn, (x,), quiet=True)
    torch.testing.assert_close(compiled(x), fn(x))
    (kernel,) = compiled.default.program.kernels
    assert kernel.loop_ir.count("scf.for") == kernel.loop_ir.count("iter_args")


def test_a_row_loop_that_stores_what_it_sums_sums_each_value_once() -> None:
    """Fuzz seed 445 program 476: a concatenation returned and its rotation's mean, one loop
    over the row writing the one and summing the other. Each value is loaded for both; with
    `nsz` on the sum, LLVM 22's SLP vectorizer folded the repeated values into products and
    counted some of them once (a mean 7% off), so the sums carry `reassoc` alone."""
    torch.manual_seed(0)
    v = torch.randn(3, 4)

    def fn(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cat = torch.cat([t, t], dim=1)
        return cat, torch.rot90(cat, -1, (0, 1)).mean()

    compiled = xfuse.compile(fn, (v,), quiet=True)
    torch.testing.assert_close(compiled(v), fn(v))
    assert len(compiled.default.program.kernels) == 1


def test_a_short_f32_sum_is_the_f32_nearest_its_exact_value() -> None:
    """Training fuzz seed 81, program 1990: a sum over dims (0, 2) of a (5, 5, 6) input in
    f32 partial sums landed 3 ulps from the exact sum on one channel (eager's, by its order,
    0.06), and `acos` near its clamp multiplied that into a gradient 15x eager's distance
    from f64. A sum of at most `SHORT_SUM` f32 terms accumulates in f64 and rounds once."""
    x = torch.randn((5, 5, 6), generator=torch.Generator().manual_seed(81002233))

    def fn(t: torch.Tensor) -> torch.Tensor:
        return t.sum(dim=(0, 2)) + 0.0

    compiled = xfuse.compile(fn, (x,), quiet=True)
    exact = x.double().sum(dim=(0, 2)).float()
    assert torch.equal(compiled(x), exact)
    (kernel,) = compiled.default.program.kernels
    assert "f64" in kernel.loop_ir


@pytest.mark.parametrize("shape", [(8, 33, 8), (2112,), (63, 1024)])
def test_a_cancelling_f32_sum_to_one_value_is_the_f32_nearest_its_exact_value(
    shape: tuple[int, ...],
) -> None:
    """Training fuzz seed 84, program 258: the sum of 2,112 rms-normed values (a sum of
    magnitude 2,000 that cancels to 0.75) landed 2e-5 relative off, eager's 1e-6. A sum of f32
    to one value of at most `TOTAL_SUM` terms accumulates in f64 and rounds once, however it
    is looped over."""
    x = torch.randn(shape, generator=torch.Generator().manual_seed(84000510))
    x = x - x.double().mean().float()  # the terms now cancel

    def fn(t: torch.Tensor) -> torch.Tensor:
        return t.sum() * 1.0

    compiled = xfuse.compile(fn, (x,), quiet=True)
    assert torch.equal(compiled(x), x.double().sum().float())
    assert any("f64" in k.loop_ir for k in compiled.default.program.kernels)


def test_a_sum_to_one_value_in_f64_is_one_kernel() -> None:
    """`TOTAL_SUM` stays under the length from which `split-reductions` splits a sum across
    threads (whose first stage keeps f32 partial sums)."""
    from xfuse.passes.lowering.reductions import TOTAL_SUM
    from xfuse.passes.transforms.split_reductions import SplitReductionsPass

    assert TOTAL_SUM < SplitReductionsPass().min_length
