"""Print what the compile cache's keys hash besides the source (compiler.Toolchain.key), as JSON.

A kernel cache built on one machine is found on another only where these match, so
test-kernels.sh packs them with its kernels and gpu-session.sh compares them with the GPU
machine's, to say why a carried cache was missed rather than miss it silently.
"""

import json

from cutsearch.codegen import cutlass_version
from cutsearch.compiler import Toolchain

toolchain = Toolchain.find(cutlass_version())
print(json.dumps({"nvcc": toolchain.nvcc_version, "cutlass": toolchain.cutlass_version, "arch": toolchain.arch,
                  "flags": list(toolchain.flags), "headers": toolchain.headers,
                  "build": toolchain.build.splitlines()}, indent=1))
