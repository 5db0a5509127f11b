"""CUDA graphs (`xfuse.runtime.cuda_graphs`): replays match eager, outputs the caller keeps
survive later calls (a graph whose memory the caller holds is never replayed), outputs the
caller dropped are handed over with no copy, moved parameters capture anew, programs that write
memory are never captured (and say why), and launches go to whatever stream torch is on."""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any

import pytest
import torch

import xfuse
from examples.mlp import make_mlp
from examples.transformer import make_transformer_block
from tests.backends.test_cuda import gpu
from tests.runtime.runtime_fakes import CPUGraphRunner
from xfuse.ir.context import parse
from xfuse.runtime.cuda_graphs import (
    PRICE_WAITS,
    GraphMemory,
    GraphRunner,
    graph_pays,
    why_not_capturable,
)
from xfuse.runtime.executor import run_program
from xfuse.runtime.steps import BufferPool


def _runner(compiled: xfuse.api.CompiledProgram) -> GraphRunner:
    graphs = compiled.default.graphs
    assert graphs is not None
    return graphs


def test_a_program_that_writes_memory_is_not_capturable() -> None:
    module = parse(
        """
        func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
          %0 = graph.torch_call "aten.add_.Tensor"(%x, %x) args = ["%t0", "%t1"] kwargs = {} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
          func.return %0 : tensor<4xf32>
        }
        """
    )
    reason = why_not_capturable(module)
    assert reason is not None and "writes memory it does not own (graph.torch_call)" in reason


def test_a_pure_program_is_capturable() -> None:
    compiled = xfuse.compile(lambda x: torch.relu(x) * 2, (torch.randn(8),), quiet=True)
    assert why_not_capturable(compiled.default.program.module) is None
    assert (
        xfuse.explain(lambda x: torch.relu(x) * 2, (torch.randn(8),), quiet=True).cuda_graph is None
    )


@gpu
@pytest.mark.parametrize("make", [make_mlp, make_transformer_block], ids=["mlp", "transformer"])
def test_replays_match_eager_and_kept_outputs_survive(make: object) -> None:
    model, (example,) = make()  # type: ignore[operator]
    model = model.cuda().eval()
    with torch.no_grad():
        compiled = xfuse.compile(model, (example.cuda(),), device="cuda", quiet=True)
        inputs = [torch.randn_like(example).cuda() for _ in range(5)]
        kept = [compiled(x) for x in inputs]  # warm-up, capture, then replays
        expected = [model(x) for x in inputs]
    runner = _runner(compiled)
    # Calls 2 and 3 hand over their graph's memory; the third capture's outputs are copied.
    assert runner.reason is None and runner.captures == 3 and runner.replays == 4
    assert runner.handed == 2
    for got, want in zip(kept, expected, strict=True):
        torch.testing.assert_close(got, want)  # each kept output is still its call's value
    assert len({t.data_ptr() for t in kept}) == len(kept)


def test_graph_memory_is_free_only_when_nothing_of_the_callers_refers_to_it() -> None:
    """The runner's test of whether a replay may overwrite a graph's memory, on CPU tensors:
    a tensor, a view or the storage object the caller keeps holds it."""
    out, copy = torch.randn(8), torch.randn(4)
    memory = GraphMemory([out, copy, out])
    assert memory.free()
    handed = out.detach()
    assert not memory.free()
    del handed
    assert memory.free()
    view = out.detach()[2:]
    assert not memory.free()
    del view
    storage = out.detach().untyped_storage()
    assert not memory.free()
    del storage
    row = copy.detach().view(2, 2)[1]
    assert not memory.free()
    del row
    assert memory.free()


def _cpu_runner(
    released: bool = False,
) -> tuple[CPUGraphRunner, Callable[[torch.Tensor], torch.Tensor]]:
    compiled = xfuse.compile(lambda t: torch.sigmoid(t) * 2, (torch.randn(16),), quiet=True)
    runner = CPUGraphRunner(
        compiled.default.program, run_program, torch.device("cpu"), released=released
    )

    def call(x: torch.Tensor) -> torch.Tensor:
        def finish(results: list[torch.Tensor], copy_out: bool) -> list[torch.Tensor]:
            return [r.clone() for r in results] if copy_out else results

        with torch.no_grad():
            (y,) = runner.run([x], [], BufferPool("cpu"), finish)
        return y

    return runner, call


def test_ring_hands_over_what_the_caller_dropped_and_never_overwrites_what_it_holds() -> None:
    runner, call = _cpu_runner()
    xs = [torch.randn(16) for _ in range(12)]
    want = [torch.sigmoid(x) * 2 for x in xs]
    call(xs[0])  # the warm-up: fresh memory
    for x, w in zip(xs[1:4], want[1:4], strict=True):  # dropped at once: one capture serves
        torch.testing.assert_close(call(x), w)
    assert runner.captures == 1 and runner.handed == 3
    y = call(xs[4])
    for i in range(5, 8):  # `y = f(x)`: the last result held through the next call
        previous, y = y, call(xs[i])
        torch.testing.assert_close(previous, want[i - 1])
        torch.testing.assert_close(y, want[i])
        del previous
    assert runner.captures == 2 and runner.handed == 7
    kept = [call(x) for x in xs[8:]]  # every result kept: the third capture copies out
    for got, w in zip(kept, want[8:], strict=True):
        torch.testing.assert_close(got, w)
    assert runner.captures == 3 and runner.replays == 11 and runner.handed < runner.replays


def test_a_released_programs_outputs_are_always_handed_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A training step's forward (`released`): its outputs count for nothing in whether graphs
    pay, none is ever copied out, and with both captures held a call runs step by step."""
    from xfuse.runtime import cuda_graphs

    priced: list[int] = []
    monkeypatch.setattr(cuda_graphs, "graph_pays", lambda copied, steps: not priced.append(copied))
    runner, call = _cpu_runner(released=True)
    xs = [torch.randn(16) for _ in range(10)]
    want = [torch.sigmoid(x) * 2 for x in xs]
    torch.testing.assert_close(call(xs[0]), want[0])
    assert priced == [16 * 4]  # the input alone
    y = call(xs[1])
    for i in range(2, 5):  # the last step's outputs held through the next: two captures
        previous, y = y, call(xs[i])
        torch.testing.assert_close(previous, want[i - 1])
        torch.testing.assert_close(y, want[i])
        del previous
    assert runner.captures == 2 and runner.handed == runner.replays == 4
    kept = [call(x) for x in xs[5:]]  # every result kept: step by step once both are held
    for got, w in zip(kept, want[5:], strict=True):
        torch.testing.assert_close(got, w)
    assert runner.captures == 2 and runner.handed == runner.replays


def test_an_input_where_it_was_at_the_last_call_is_read_in_place() -> None:
    """An input at the address it had at the warm-up is read where it is, not copied: an
    in-place write to it between calls is what the next replay reads; a tensor elsewhere
    captures anew, copied in."""
    runner, call = _cpu_runner()
    x = torch.randn(16)
    call(x)
    torch.testing.assert_close(call(x), torch.sigmoid(x) * 2)
    (captured,) = runner._ring
    assert captured.copied == () and captured.in_place == [0]
    x.mul_(3.0)
    torch.testing.assert_close(call(x), torch.sigmoid(x) * 2)
    assert runner.captures == 1 and runner.replays == 2
    assert runner.status().endswith("; 2 of 3 calls replayed a graph (1 capture)")
    other = torch.randn(16)
    torch.testing.assert_close(call(other), torch.sigmoid(other) * 2)
    (captured,) = runner._ring
    assert runner.captures == 2 and captured.copied == (0,)


def test_an_input_read_in_place_that_moves_is_priced_before_it_is_copied_in(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An input too large to copy at every replay is read in place while it stays where it
    was; when another tensor comes in its place, the capture anew would copy it, so it is
    priced first: that call runs step by step, and the next, finding the input where it was,
    captures reading it in place."""
    from xfuse.runtime import cuda_graphs

    priced: list[int] = []

    def pays(copied: int, steps: int) -> bool:
        priced.append(copied)
        return False

    monkeypatch.setattr(cuda_graphs, "graph_pays", pays)
    runner, call = _cpu_runner()
    x = torch.randn(16)
    for _ in range(3):  # the warm-up finds copying too dear; the capture reads `x` in place
        torch.testing.assert_close(call(x), torch.sigmoid(x) * 2)
    assert runner.captures == 1 and runner._ring[0].copied == () and runner.reason is None
    other = torch.randn(16)
    torch.testing.assert_close(call(other), torch.sigmoid(other) * 2)
    assert runner.captures == 1 and priced == [16 * 4, 16 * 4] and runner.reason is None
    for _ in range(2):
        torch.testing.assert_close(call(other), torch.sigmoid(other) * 2)
    assert runner.captures == 2 and runner.replays == 4 and runner.reason is None
    assert runner._ring[0].copied == () and priced == [16 * 4, 16 * 4]


def test_an_input_too_large_to_copy_that_moves_at_every_call_runs_step_by_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where the input the capture would copy in is elsewhere at every call, graphs give up
    after `PRICE_WAITS` calls run step by step, and say why."""
    from xfuse.runtime import cuda_graphs

    monkeypatch.setattr(cuda_graphs, "graph_pays", lambda copied, steps: copied == 0)
    runner, call = _cpu_runner()
    xs = [torch.randn(16) for _ in range(cuda_graphs.PRICE_WAITS + 3)]  # all held: new places
    for i, x in enumerate(xs):
        torch.testing.assert_close(call(x), torch.sigmoid(x) * 2)
        assert (runner.reason is None) == (i <= cuda_graphs.PRICE_WAITS)
    assert runner.captures == 0 and runner.reason is not None
    assert "copying its inputs" in runner.reason
    assert runner.status() == f"not used: {runner.reason}"


def test_a_capture_keeps_no_reference_to_what_it_reads_in_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A program that reads another's handed-over outputs in place (a backward reading what
    its forward saved, too large to copy) does not keep them: once the caller drops them, the
    producer's capture is free for its next replay, so the outputs stay where they were and
    neither program captures again."""
    from xfuse.runtime import cuda_graphs

    monkeypatch.setattr(cuda_graphs, "graph_pays", lambda copied, steps: copied == 0)
    producer, make = _cpu_runner(released=True)
    consumer, use = _cpu_runner()
    x = torch.randn(16)
    for _ in range(6):
        x.copy_(torch.randn(16))
        y = make(x)
        watch = weakref.ref(y)
        torch.testing.assert_close(use(y), torch.sigmoid(torch.sigmoid(x) * 2) * 2)
        del y
        assert watch() is None
    # The consumer's second call finds the producer's output elsewhere than at the warm-up
    # (the producer's capture wrote it) and runs step by step; its third captures.
    assert producer.captures == 1 and producer.replays == 5
    assert consumer.captures == 1 and consumer.replays == 4 and consumer.reason is None
    assert consumer._ring[0].in_place == [0] and consumer._ring[0].inputs == [None]


def test_an_output_that_views_an_input_read_in_place_is_that_input_at_each_replay(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A program whose result is a view of an input it reads in place (a slice times one,
    which xfuse makes a view: the output plan copies it for the caller) hands over a view of
    the call's own tensor, and its capture keeps no reference to it: the producer of that
    input replays one capture throughout."""
    from xfuse.runtime import cuda_graphs

    monkeypatch.setattr(cuda_graphs, "graph_pays", lambda copied, steps: copied == 0)
    producer, make = _cpu_runner(released=True)
    compiled = xfuse.compile(
        lambda t: (torch.sigmoid(t) * 2, t[2:6] * 1), (torch.randn(16),), quiet=True
    )
    consumer = CPUGraphRunner(compiled.default.program, run_program, torch.device("cpu"))
    x = torch.randn(16)
    for _ in range(6):
        x.copy_(torch.randn(16))
        y = make(x)
        with torch.no_grad():
            z, view = consumer.run([y], [], BufferPool("cpu"), lambda r, c: r)
        torch.testing.assert_close(z, torch.sigmoid(y) * 2)
        assert view.data_ptr() == y[2:6].data_ptr() and view.shape == (4,)
        watch = weakref.ref(y)
        del y, z, view
        assert watch() is None
    assert producer.captures == 1 and consumer.captures == 1 and consumer.replays == 4
    (captured,) = consumer._ring
    assert captured.outputs[1] is None and captured.views[1].offset == 2


def test_a_copy_of_an_input_read_in_place_is_made_in_the_graph_at_one_address(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A program that returns a copy of an input it reads in place (an identity `clone`: a
    training forward's copy of a tensor it returns and saves) gets the copy made by the
    graph, in its own memory: each replay writes it at one address with the call's values,
    where the output rules would copy it at each call into memory the allocator places
    anywhere."""
    from xfuse.runtime import cuda_graphs

    monkeypatch.setattr(cuda_graphs, "graph_pays", lambda copied, steps: copied == 0)
    producer, make = _cpu_runner(released=True)
    compiled = xfuse.compile(
        lambda t: (torch.sigmoid(t) * 2, t.clone()), (torch.randn(16),), quiet=True
    )
    plan = compiled.default.outputs
    fresh = [rule.stride if rule.base == "fresh" else None for rule in plan.rules]
    consumer = CPUGraphRunner(
        compiled.default.program, run_program, torch.device("cpu"), released=True, fresh=fresh
    )
    x = torch.randn(16)
    addresses = set()
    for _ in range(6):
        x.copy_(torch.randn(16))
        y = make(x)
        finish = functools.partial(plan.apply, [y])
        with torch.no_grad():
            z, copy = consumer.run([y], [], BufferPool("cpu"), finish)
        want = y.clone()
        y.add_(1.0)  # a write after the call: the copy keeps the call's values
        torch.testing.assert_close(z, torch.sigmoid(want) * 2)
        torch.testing.assert_close(copy, want)
        assert copy.untyped_storage().data_ptr() != y.untyped_storage().data_ptr()
        if consumer.replays:
            addresses.add(copy.data_ptr())
        del y, z, copy, finish
    assert producer.captures == 1 and consumer.captures == 1 and consumer.replays == 4
    (captured,) = consumer._ring
    assert captured.outputs[1] is not None and not captured.views
    assert addresses == {captured.outputs[1].data_ptr()}


def test_an_input_elsewhere_at_the_capture_than_at_the_warm_up_is_copied_in() -> None:
    """An input the caller passes at a new address at every call (or one whose producer wrote
    it elsewhere at the warm-up than at the capture) is copied into the graph at every
    replay: one capture serves, with eager's values."""
    runner, call = _cpu_runner(released=True)
    first, state = torch.randn(16), torch.randn(16)
    call(first)  # the warm-up
    for _ in range(3):
        state.add_(1.0)
        torch.testing.assert_close(call(state), torch.sigmoid(state) * 2)
    (captured,) = runner._ring
    assert runner.captures == 1 and captured.copied == (0,) and runner.replays == 3


def test_outputs_count_only_where_a_replay_would_copy_them_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where copying a call's input in pays but its input and output do not: a caller that
    drops its outputs gets them handed over from replays; one that holds every capture's
    outputs runs step by step rather than replaying and copying out."""
    from xfuse.runtime import cuda_graphs

    priced: list[int] = []

    def pays(copied: int, steps: int) -> bool:
        priced.append(copied)
        return copied <= 16 * 4  # the input alone

    monkeypatch.setattr(cuda_graphs, "graph_pays", pays)
    runner, call = _cpu_runner()
    xs = [torch.randn(16) for _ in range(12)]
    want = [torch.sigmoid(x) * 2 for x in xs]
    for x, w in zip(xs[:4], want[:4], strict=True):  # dropped at once: replays hand over
        torch.testing.assert_close(call(x), w)
    assert runner.reason is None and runner.captures == 1 and runner.handed == 3
    assert priced == [16 * 4]  # the warm-up priced the input alone
    kept = [call(x) for x in xs[4:]]  # every result kept: the third capture would copy out
    for got, w in zip(kept, want[4:], strict=True):
        torch.testing.assert_close(got, w)
    assert runner.captures == 3 and runner.stepped == len(xs[4:]) - 2
    assert runner.handed == runner.replays == 5
    assert priced[1:] == [2 * 16 * 4] * runner.stepped


def test_weights_that_move_at_every_call_are_copied_in_from_the_second_move(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A parameter read in place that moves at two calls in a row (FSDP's gathered weights) is
    copied into the graph's buffers from then on: the capture made then serves every later
    call, whose results are eager's; the copy is priced like the inputs'."""
    from xfuse.runtime import cuda_graphs

    priced: list[int] = []
    monkeypatch.setattr(cuda_graphs, "graph_pays", lambda copied, steps: not priced.append(copied))
    compiled = xfuse.compile(
        lambda x, w, b: torch.relu(x @ w.t() + b),
        (torch.randn(4, 16), torch.randn(16, 16), torch.randn(16)),
        quiet=True,
    )
    runner = CPUGraphRunner(compiled.default.program, run_program, torch.device("cpu"))
    x, b = torch.randn(4, 16), torch.randn(16)

    def call(w: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            (y,) = runner.run(
                [x, w, b], [w, b], BufferPool("cpu"), lambda r, c: [t.clone() for t in r]
            )
        return y

    weights = [torch.randn(16, 16) for _ in range(7)]  # a new address at every call
    for w in weights:
        torch.testing.assert_close(call(w), torch.relu(x @ w.t() + b))
    # The warm-up, a capture, a move (captured anew), a second move in a row (captured with
    # the weight copied in); the last three calls replay that capture. `x`, the same tensor at
    # every call, is read where it is, as the bias is.
    assert runner.reason is None and runner.captures == 3 and runner.replays == 6
    (captured,) = runner._ring
    assert captured.copied == (1,) and captured.in_place == [0, 2]
    assert priced == [4 * 16 * 4, 16 * 16 * 4]  # the warm-up's user input; the weight
    b.add_(1.0)  # still read where it is
    torch.testing.assert_close(call(weights[-1]), torch.relu(x @ weights[-1].t() + b))
    assert runner.captures == 3


def test_ring_serves_threads_one_replay_at_a_time() -> None:
    import concurrent.futures

    runner, call = _cpu_runner()
    xs = [torch.randn(16) for _ in range(64)]
    call(xs[0])
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        got = list(pool.map(call, xs))
    for y, x in zip(got, xs, strict=True):
        torch.testing.assert_close(y, torch.sigmoid(x) * 2)


def test_threads_that_waited_for_the_warm_up_respect_its_verdict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first call decides that graphs do not pay; the calls that waited for it run step by
    step too, and none captures."""
    import concurrent.futures

    from xfuse.runtime import cuda_graphs

    monkeypatch.setattr(cuda_graphs, "graph_pays", lambda copied, steps: False)
    runner, call = _cpu_runner()
    xs = [torch.randn(16) for _ in range(32)]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        got = list(pool.map(call, xs))
    for y, x in zip(got, xs, strict=True):
        torch.testing.assert_close(y, torch.sigmoid(x) * 2)
    assert runner.reason is not None and runner.captures == 0


def _mlp_on_gpu() -> tuple[torch.nn.Module, torch.Tensor, xfuse.api.CompiledProgram]:
    model, (example,) = make_mlp()
    model = model.cuda().eval()
    with torch.no_grad():
        compiled = xfuse.compile(model, (example.cuda(),), device="cuda", quiet=True)
    return model, example.cuda(), compiled


@gpu
def test_outputs_the_caller_dropped_are_handed_over_with_no_copy() -> None:
    model, x, compiled = _mlp_on_gpu()
    refilled = torch.empty_like(x)  # one input tensor: where a fresh one lands is the allocator's
    with torch.no_grad():
        pointers = {compiled(refilled.normal_()).data_ptr() for _ in range(6)}
        got = compiled(refilled.copy_(x))
        torch.testing.assert_close(got, model(x))
    runner = _runner(compiled)
    assert runner.captures == 1 and runner.handed == runner.replays == 6
    assert len(pointers) == 2  # the warm-up's memory, then the graph's


@gpu
def test_the_last_output_held_through_the_next_call_survives_it() -> None:
    """`y = f(x)` in a loop holds the old `y` while the next call runs: a second capture takes
    every other call, and both hand their outputs over."""
    model, x, compiled = _mlp_on_gpu()
    inputs = [torch.randn_like(x) for _ in range(8)]
    with torch.no_grad():
        expected = [model(i) for i in inputs]
        y = compiled(inputs[0])
        for i in range(1, len(inputs)):
            previous, y = y, compiled(inputs[i])
            torch.testing.assert_close(previous, expected[i - 1])
            torch.testing.assert_close(y, expected[i])
            del previous
    runner = _runner(compiled)
    assert runner.captures == 2 and runner.handed == runner.replays == 7


@gpu
def test_a_kept_view_or_storage_of_an_output_holds_its_graph() -> None:
    model, x, compiled = _mlp_on_gpu()
    a, b = torch.randn_like(x), torch.randn_like(x)
    with torch.no_grad():
        compiled(a)
        row = compiled(a)[1]  # a view of a handed-over output
        storage = compiled(b).untyped_storage()  # and a storage object
        for _ in range(4):
            compiled(torch.randn_like(x))
        torch.testing.assert_close(row, model(a)[1])
        want = model(b)
        kept = torch.empty(0, device=x.device, dtype=x.dtype).set_(
            storage, 0, want.shape, want.stride()
        )
        torch.testing.assert_close(kept, want)


@gpu
@pytest.mark.parametrize("capture_mode", ["no_grad", "inference_mode"])
def test_outputs_are_inference_tensors_as_in_eager(capture_mode: str) -> None:
    """Outputs are inference tensors exactly when the call runs in inference mode, whichever
    mode the graph was captured in (a handed-over output keeps the capture's)."""
    model, x, compiled = _mlp_on_gpu()
    capture = torch.no_grad if capture_mode == "no_grad" else torch.inference_mode
    with capture():
        compiled(x)
        compiled(x)
    for mode in (torch.no_grad, torch.inference_mode, torch.no_grad):
        with mode():
            got, want = compiled(x), model(x)
        assert got.is_inference() == want.is_inference()
        torch.testing.assert_close(got, want)


@gpu
def test_a_reassigned_parameter_is_seen_and_captured_anew() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU()).cuda().eval()
    x = torch.randn(4, 16, device="cuda")
    with torch.no_grad():
        compiled = xfuse.compile(model, (x,), device="cuda", quiet=True)
        for _ in range(3):
            compiled(x)
        model[0].weight = torch.nn.Parameter(torch.randn(16, 16, device="cuda"))
        torch.testing.assert_close(compiled(x), model(x))
    assert _runner(compiled).captures == 2


def test_graphs_pay_for_small_copies_only() -> None:
    assert graph_pays(1 << 20, 1)  # a MiB in and out: 0.5 us of copies, 4 us of launch
    assert graph_pays(64 << 20, 20)  # 34 us of copies, 80 us of launches
    assert not graph_pays(2 << 30, 6)  # a 1 GiB input and output: a millisecond of copies


@gpu
def test_a_program_of_large_tensors_runs_step_by_step() -> None:
    """Copying a 1 GiB input into the graph would cost half a millisecond at every call, more
    than the launches a graph saves: the program runs without one (after the warm-up and
    `PRICE_WAITS` calls that look for the input at a stable address), and says why."""
    calls = PRICE_WAITS + 2
    xs = [torch.randn(1 << 28, device="cuda") for _ in range(calls)]  # a new address each call
    compiled = xfuse.compile(lambda t: torch.sigmoid(t) * 2, (xs[0],), device="cuda", quiet=True)
    for x in xs:
        y = compiled(x)
    runner = _runner(compiled)
    assert runner.captures == 0 and runner.reason is not None
    assert "copying its inputs (1024.0 MiB)" in runner.reason
    torch.testing.assert_close(y, torch.sigmoid(x) * 2)


@gpu
def test_graphs_can_be_turned_off() -> None:
    x = torch.randn(32, device="cuda")
    compiled = xfuse.compile(torch.sigmoid, (x,), device="cuda", quiet=True, cuda_graphs=False)
    assert compiled.default.graphs is None
    torch.testing.assert_close(compiled(x), torch.sigmoid(x))


@gpu
def test_kernels_run_on_a_user_stream() -> None:
    x = torch.randn(1 << 16, device="cuda")
    compiled = xfuse.compile(
        lambda t: torch.tanh(t) * 3, (x,), device="cuda", quiet=True, cuda_graphs=False
    )
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        y = compiled(x)
    stream.synchronize()
    torch.testing.assert_close(y, torch.tanh(x) * 3)


@gpu
def test_an_expanded_input_is_captured_and_replays_match_eager() -> None:
    """An input that overlaps itself (stride 0) cannot be `copy_`-ed into the graph's buffer:
    the memory it spans is copied instead, so the program still runs as a graph."""

    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x * 2, dim=-1) + x

    def expanded(seed: int) -> torch.Tensor:
        gen = torch.Generator().manual_seed(seed)
        return torch.randn(8, 2, 1, generator=gen).cuda().expand(8, 2, 16)[1:]

    compiled = xfuse.compile(fn, (expanded(0),), device="cuda", quiet=True)
    inputs = [expanded(seed) for seed in range(4)]
    kept = [compiled(x) for x in inputs]
    runner = _runner(compiled)
    assert runner.reason is None and runner.replays == 3
    for got, x in zip(kept, inputs, strict=True):
        torch.testing.assert_close(got, fn(x))


def _function_of_its_weights(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.relu(x @ w.t() + b)


@gpu
def test_static_inputs_are_read_in_place_and_a_moved_one_captures_anew() -> None:
    """Inputs named static (the parameters `torch.compile` passes as inputs) are not copied
    into the graph: an in-place update is what the next replay reads, and another tensor in
    their place captures anew."""
    x, w, b = (torch.randn(*s, device="cuda") for s in ((4, 16), (16, 16), (16,)))
    with torch.no_grad():
        compiled = xfuse.compile(
            _function_of_its_weights, (x, w, b), device="cuda", quiet=True, static_inputs=(1, 2)
        )
        for _ in range(3):
            compiled(x, w, b)
        runner = _runner(compiled)
        (captured,) = runner._ring
        assert captured.copied == ()  # `x` too: at the same address at every call
        w.add_(1.0)
        torch.testing.assert_close(compiled(x, w, b), _function_of_its_weights(x, w, b))
        assert runner.captures == 1
        other = torch.randn(16, 16, device="cuda")
        torch.testing.assert_close(compiled(x, other, b), _function_of_its_weights(x, other, b))
        assert runner.captures == 2


@gpu
def test_parameters_that_move_at_every_call_are_copied_into_the_graph() -> None:
    """Weights gathered anew at each call (FSDP's) move every time: once they have moved at
    two calls in a row they are copied into the graph's buffers like user inputs, and later
    calls replay with eager's values; a parameter that stays put is still read in place."""
    x, w, b = (torch.randn(*s, device="cuda") for s in ((4, 16), (16, 16), (16,)))
    with torch.no_grad():
        compiled = xfuse.compile(
            _function_of_its_weights, (x, w, b), device="cuda", quiet=True, static_inputs=(1, 2)
        )
        held = []
        for _ in range(6):
            moved = torch.randn(16, 16, device="cuda")
            held.append(moved)  # a new address at every call
            # The result dropped at once: one capture serves (a held one takes a second).
            torch.testing.assert_close(compiled(x, moved, b), _function_of_its_weights(x, moved, b))
        runner = _runner(compiled)
        # The warm-up, a capture, a move that captures anew, a second move in a row that
        # captures with the weight copied in; the last two calls replay it.
        assert runner.reason is None and runner.captures == 3
        (captured,) = runner._ring
        assert captured.copied == (1,) and captured.in_place == [0, 2]
        b.add_(1.0)  # still read in place
        torch.testing.assert_close(compiled(x, moved, b), _function_of_its_weights(x, moved, b))
        assert runner.captures == 3


@gpu
def test_moving_parameters_too_large_to_copy_run_step_by_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where copying the moving weights in would cost more GPU time than a replay saves of
    host time, the program stops capturing, says why, and keeps eager's values."""
    from xfuse.runtime import cuda_graphs

    x, w, b = (torch.randn(*s, device="cuda") for s in ((4, 16), (16, 16), (16,)))
    with torch.no_grad():
        compiled = xfuse.compile(
            _function_of_its_weights, (x, w, b), device="cuda", quiet=True, static_inputs=(1, 2)
        )
        compiled(x, w, b)  # the warm-up decides with the real cost
        monkeypatch.setattr(cuda_graphs, "graph_pays", lambda copied, steps: False)
        held = []
        for _ in range(5):
            moved = torch.randn(16, 16, device="cuda")
            held.append(moved)
            torch.testing.assert_close(compiled(x, moved, b), _function_of_its_weights(x, moved, b))
        runner = _runner(compiled)
        assert runner.captures == 2
        assert runner.reason is not None and "move at every call" in runner.reason


@gpu
def test_torch_compile_reads_lifted_parameters_in_place() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU()).cuda().eval()
    x = torch.randn(4, 16, device="cuda")
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="xfuse")
    with torch.no_grad():
        for _ in range(3):
            compiled(x)
        model[0].weight.mul_(2.0)
        torch.testing.assert_close(compiled(x), model(x))


@gpu
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_torch_compiles_no_cudagraphs_mode_runs_without_graphs(dynamic: bool) -> None:
    """`mode="max-autotune-no-cudagraphs"` (or the option `cuda_graphs=False`) keeps the
    backend's programs out of CUDA graphs; the default mode captures them."""
    import xfuse.dynamo

    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.GELU()).cuda().eval()
    asked: list[tuple[dict[str, Any], bool]] = [
        ({"mode": "default"}, True),
        ({"mode": "max-autotune-no-cudagraphs"}, False),
        ({"options": {"fallback": "error", "cuda_graphs": False}}, False),
    ]
    batches = (4, 4, 6, 6, 6) if dynamic else (4, 4, 4)
    for how, captured in asked:
        torch._dynamo.reset()
        xfuse.dynamo.BACKEND_PROGRAMS.clear()
        compiled = torch.compile(model, backend="xfuse", dynamic=dynamic, **how)
        with torch.no_grad():
            for batch in batches:
                x = torch.randn(batch, 16, device="cuda")
                torch.testing.assert_close(compiled(x), model(x))
        (run,) = xfuse.dynamo.BACKEND_PROGRAMS.values()
        program = run.dynamic if dynamic else run.compiled.default  # type: ignore[attr-defined]
        assert (program.graphs is not None) == captured, how
    torch._dynamo.reset()


@gpu
@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
def test_dropout_draws_eagers_mask_at_every_call(grad: bool) -> None:
    """A seeded call draws eager's mask whether it warms up, captures or replays: the run
    before each capture puts the generator back. Holding every output makes each call of the
    ring's size capture (the calls that captured drew from a generator that run had moved)."""
    x = torch.randn(64, 256, device="cuda", requires_grad=grad)

    def fn(a: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.dropout(a, 0.5, training=True) * 2

    program = xfuse.compile(fn, (x,), "cuda", quiet=True, fallback="error")
    held = []
    for seed in (1, 2, 3, 4, 5, 1):
        torch.manual_seed(seed)
        held.append(program(x))
        torch.manual_seed(seed)
        torch.testing.assert_close(held[-1], fn(x), rtol=0, atol=0)


@gpu
@pytest.mark.parametrize("limit", [64 << 10, 1 << 30])
def test_a_capture_over_its_gpus_share_is_made_once_and_copies_out(
    monkeypatch: pytest.MonkeyPatch, limit: int
) -> None:
    """A program whose capture holds `ring_max_bytes` of the GPU or more (a share of its
    memory) is captured once and copies its outputs out; below it, a caller that holds the
    last call's output gets a second capture and every output is handed over."""
    from xfuse.runtime import cuda_graphs

    monkeypatch.setattr(cuda_graphs, "ring_max_bytes", lambda device: limit)
    x = torch.randn(1 << 16, device="cuda")  # 256 KiB in, 256 KiB out
    with torch.no_grad():
        compiled = xfuse.compile(lambda t: torch.sigmoid(t) * 2, (x,), device="cuda", quiet=True)
        y = compiled(x)
        for _ in range(4):  # `y = f(x)`: the last result held through the next call
            previous, y = y, compiled(x)
            torch.testing.assert_close(previous, torch.sigmoid(x) * 2)
            del previous
    runner = _runner(compiled)
    if limit < 1 << 20:
        assert runner.captures == 1 and runner.handed == 0 and runner.replays == 4
    else:
        assert runner.captures == 2 and runner.handed == runner.replays == 4


class _ConvHead(torch.nn.Module):
    """A convolution (channels-last on CUDA) and a head whose 13 bf16 columns are padded for
    the GEMM (`pad-matmul`): the weights of both are read through what xfuse makes of them."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.head = torch.nn.Linear(16, 13)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.conv(x)).mean((2, 3)))


@gpu
def test_weights_written_through_data_are_read_at_the_next_replay() -> None:
    """A write through `.data` bumps no version counter; the replayed graph reads the
    parameters themselves, so the next call computes with the new values, as eager does."""
    torch._dynamo.reset()
    model = _ConvHead().to("cuda", torch.bfloat16).eval()
    x = torch.randn(2, 8, 12, 12, device="cuda", dtype=torch.bfloat16)
    compiled = torch.compile(model, backend="xfuse", options={"fallback": "error"})
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(compiled(x), model(x))
        model.conv.weight.data.mul_(-2)
        model.head.weight.data.mul_(4)
        torch.testing.assert_close(compiled(x), model(x))
    torch._dynamo.reset()


def test_a_call_on_two_devices_names_the_tensors_off_its_device() -> None:
    """The reason a program with a tensor off its device runs step by step names that tensor,
    whichever device it is on (meta stands in for the program's GPU, the CPU for another
    device)."""
    from xfuse.runtime.cuda_graphs import _off_device

    meta = torch.device("meta")
    args = [torch.tensor(2, dtype=torch.int64), torch.empty(4, device="meta"), torch.randn(2, 3)]
    assert _off_device(args, [], meta) == "input 0 (cpu, [], int64), input 2 (cpu, [2, 3], float32)"
    many = _off_device(args, [torch.randn(1)] * 3, meta)
    assert many.endswith("output 0 (cpu, [1], float32) and 2 more")
    assert _off_device(args[1:2], [], meta) == ""
    assert _off_device(args, [], torch.device("cpu")) == "input 1 (meta, [4], float32)"
