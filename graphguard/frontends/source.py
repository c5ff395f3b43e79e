"""Where an operator came from in the user's code, read from a stack trace a frontend's input carries (an fx
node's ``stack_trace``, an exported ONNX node's ``pkg.torch.onnx.stack_trace``): text only, never evaluated."""
from __future__ import annotations

import os
import re


def frame_from_stack(stack: str | None) -> tuple[str | None, str | None]:
    """The innermost frame of the user's code in a stack trace: (``file.py:line``, function name)."""
    if not stack:
        return None, None
    found = re.findall(r'File "([^"]+)", line (\d+)(?:, in (\S+))?', stack)
    # frames of libraries are not the user's; a model library's own model code (HF's modeling_*.py) is
    lib = r"[/\\](torch|functorch|graphguard[/\\]patches)[/\\]|[/\\]transformers[/\\](?!models[/\\])"
    user = [f for f in found if not re.search(lib, f[0])]
    if not (user or found):
        return None, None
    path, line, func = (user or found)[-1]  # the innermost frame of the user's code
    return f"{os.path.basename(path)}:{line}", func or None
