import ctypes, sys, torch
sys.path.insert(0, '.')
from cutsearch.abi import open_library
lib = open_library(sys.argv[1])
m, n, k, pad_n, pad_k = 3000, 1001, 999, 1001, 1000
torch.manual_seed(0)
x = torch.randn(m, k, device="cuda", dtype=torch.float16)
w = torch.randn(n, k, device="cuda", dtype=torch.float16)
b = torch.randn(n, device="cuda", dtype=torch.float16)
wp = torch.zeros(pad_n, pad_k, device="cuda", dtype=torch.float16); wp[:, :k] = w
io = int(sys.argv[2]) if len(sys.argv) > 2 else 0
xp = torch.zeros(m, pad_k, device="cuda", dtype=torch.float16); xp[:, :k] = x
y = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
h = ctypes.c_void_p()
print("create", lib.cs_create(ctypes.byref(h), m, n, k, pad_n, pad_k, 0, 1, 1, 1, 0, 0, io), flush=True)
ws = torch.empty(max(1, lib.cs_workspace_size(h)), dtype=torch.uint8, device="cuda")
r = lib.cs_bind(h, (xp if io & 1 else x).data_ptr(), wp.data_ptr(), b.data_ptr(), y.data_ptr(), ws.data_ptr())
print("bind", r, lib.cs_error(h), flush=True)
r = lib.cs_run(h, torch.cuda.current_stream().cuda_stream)
print("run", r, lib.cs_error(h), flush=True)
torch.cuda.synchronize()
ref = torch.nn.functional.linear(x.double(), w.double(), b.double())
print("rel err", float((y.double() - ref).norm() / ref.norm()), flush=True)
