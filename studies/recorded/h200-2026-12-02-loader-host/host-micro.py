# Run inline, verbatim, on the H200 host (PYTHONPATH=/tmp/site:$PWD python3 - < host-micro.py),
# against the 298x384x7936 f16 GELU export (the cuBLAS fallback through torch), new loader.
import time,torch,torch.nn.functional as F,cutsearch
x=torch.randn(298,7936,device="cuda",dtype=torch.half);w=torch.randn(384,7936,device="cuda",dtype=torch.half)/89;y=torch.empty(298,384,device="cuda",dtype=torch.half)
fc=cutsearch.load("build/export-random5").prepare(w)
wt=w.t();g=torch._C._nn.gelu_
V={"F.linear+F.gelu":lambda:F.gelu(F.linear(x,w)),"F.linear":lambda:F.linear(x,w),"mm out":lambda:torch.mm(x,wt,out=y),"mm":lambda:torch.mm(x,wt),"mm out+gelu_":lambda:(torch.mm(x,wt,out=y),g(y)),"gelu_":lambda:g(y),"fc out":lambda:fc(x,out=y),"fc":lambda:fc(x)}
def host(c,n=300):
  torch.cuda.synchronize();t=time.perf_counter()
  for _ in range(n):c()
  s=time.perf_counter()-t;torch.cuda.synchronize();return s/n*1e6
def hostsync(c,n=100):
  s=0
  for _ in range(n):
    torch.cuda.synchronize();t=time.perf_counter();c();s+=time.perf_counter()-t
  return s/n*1e6
for r in range(2):
  for k,c in V.items():
    for _ in range(20):c()
    print(r,f"{k:18s} async {host(c):6.1f}  synced {hostsync(c):6.1f}",flush=True)
