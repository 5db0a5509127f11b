import cProfile, pstats, time, torch, xfuse, statistics
from benchmarks.models import build
torch.set_num_threads(2)
model, inputs = build("gpt2", "small", "cpu", torch.float32)
with torch.no_grad():
    c = xfuse.compile(model, inputs, "cpu", quiet=True)
    for _ in range(20): c(*inputs)
    ts=[]
    for _ in range(200):
        t=time.perf_counter(); c(*inputs); ts.append(time.perf_counter()-t)
    print("xfuse ms", statistics.median(ts)*1e3)
    ts=[]
    for _ in range(200):
        t=time.perf_counter(); model(*inputs); ts.append(time.perf_counter()-t)
    print("eager ms", statistics.median(ts)*1e3)
    pr=cProfile.Profile(); pr.enable()
    for _ in range(300): c(*inputs)
    pr.disable()
pstats.Stats(pr).sort_stats("tottime").print_stats(25)
