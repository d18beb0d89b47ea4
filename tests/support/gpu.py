"""Whether this machine has an NVIDIA GPU, for the tests of the GPU campaign's tools (tests/hw),
which check what a run says without one, and only the report's shape with one."""
import subprocess


def has_gpu():
    """nvidia-smi lists a device (False without nvidia-smi, or when it fails or hangs)."""
    try:
        return bool(subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True,
                                   timeout=20).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        return False
