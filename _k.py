import sys, torch, xfuse
from benchmarks.models import build
name = sys.argv[1]
model, inputs = build(name, "small", "cpu", torch.float32)
with torch.no_grad():
    c = xfuse.compile(model, inputs, "cpu", quiet=True)
for k in c.kernels:
    print(k)
print(len(c.kernels))
for g in c.groups: print(g.status if hasattr(g,'status') else '', getattr(g,'ops',None) or g)
