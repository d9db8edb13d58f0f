"""The on-node half of ``hpc-grpo doctor``: collect facts on one node and print them as JSON.

``python -m hpc_grpo.runtime.probe ...`` runs once per node under srun. It only reports what it
sees (versions, names, interfaces, ports, files, GPUs); ``hpc_grpo.preflight.doctor`` judges. Stdlib only
(torch is imported only to count GPUs where nvidia-smi is missing), so a node without the training
stack still reports why it cannot train instead of crashing before it says anything.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hpc_grpo import __version__
from hpc_grpo.rundir.checkpoints import existing_parent, free_bytes
from hpc_grpo.rundir.contract import DEFAULT_PORT_RANGE, PORTS_PER_JOB, job_port, port_slots
from hpc_grpo.rundir.hardware import slurm_memory_gib
from hpc_grpo.runtime.node import slurm_facts
from hpc_grpo.runtime.probe_lines import report_lines

PACKAGES = ("torch", "trl", "vllm", "transformers", "deepspeed", "accelerate", "peft")
_BRACKET = re.compile(r"^(.*?)\[([^\]]+)\](.*)$")
NEEDS = "the requeue's scontrol must reach slurmctld: slurm.conf and munge where it runs"


def expand_hostlist(hostlist: str) -> list[str]:
    """Slurm's compressed node list (``gpu[01-03,07],login1``) as names, in order.

    Used where ``scontrol show hostnames`` is missing, which is itself worth reporting."""
    names: list[str] = []
    depth, start = 0, 0
    for i, char in enumerate(hostlist + ","):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            if hostlist[start:i].strip():
                names += _expand_one(hostlist[start:i].strip())
            start = i + 1
    return names


def _expand_one(pattern: str) -> list[str]:
    match = _BRACKET.match(pattern)
    if not match:
        return [pattern]
    head, ranges, tail = match.groups()
    out: list[str] = []
    for part in ranges.split(","):
        low, _, high = part.partition("-")
        width = len(low)
        for number in range(int(low), int(high or low) + 1):
            out += [f"{head}{number:0{width}d}{rest}" for rest in _expand_one(tail)]
    return out


def _fact(ok: bool, detail: str) -> dict[str, Any]:
    return {"ok": ok, "detail": detail}


def versions() -> dict[str, str | None]:
    """Installed versions from package metadata: no import, so a broken package still reports."""
    found: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def trl_vllm_requirement() -> str:
    """The vLLM range the installed TRL declares for its ``vllm`` extra ("" when unknown)."""
    try:
        requires = importlib.metadata.requires("trl") or []
    except importlib.metadata.PackageNotFoundError:
        return ""
    for line in requires:
        if re.match(r"^vllm\b", line) and 'extra == "vllm"' in line:
            return line.split(";")[0][4:].strip()
    return ""


def node_names(nodelist: str, job_id: int = 0) -> tuple[list[str], dict[str, Any]]:
    """The allocation's names the way the job script gets them (scontrol), and whether scontrol
    works here: with a job id, also whether it reaches slurmctld (``controller``)."""
    path = shutil.which("scontrol")
    if path is None:
        return expand_hostlist(nodelist), _fact(False, "scontrol not on PATH of the compute node")
    out, problem = _scontrol([path, "show", "hostnames", nodelist])
    if problem:
        return expand_hostlist(nodelist), _fact(False, problem)
    return out.split(), controller(path, job_id) if job_id else _fact(True, path)


def controller(path: str, job_id: int) -> dict[str, Any]:
    """``scontrol show job`` asks slurmctld, as the requeue's ``scontrol requeue`` does; ``show
    hostnames`` never does, so it passes in an image without slurm.conf or munge."""
    argv = [path, "show", "job", str(job_id)]
    _, problem = _scontrol(argv)
    return _fact(False, f"{problem} ({NEEDS})") if problem else _fact(True, f"{path} reaches slurmctld")


def _scontrol(argv: list[str]) -> tuple[str, str]:
    """``argv`` (the scontrol found on PATH, then its arguments) through the runtime's one
    runner, with the probe's longer bound."""
    return slurm_facts.scontrol(argv[1:], timeout_s=20, binary=argv[0])


def resolve(names: list[str]) -> dict[str, dict[str, Any]]:
    """Each allocation name's IPv4/IPv6 address as this node resolves it."""
    found = {}
    for name in names:
        try:
            address = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)[0][4][0]
            found[name] = _fact(True, str(address))
        except OSError as err:
            found[name] = _fact(False, err.strerror or str(err))
    return found


def interface(spec: str) -> dict[str, Any]:
    """NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME as the profile sets them: every name must exist and
    be up. Asked of the kernel (if_nameindex, SIOCGIFFLAGS), not /sys/class/net, which shows
    another network namespace's devices where /sys was mounted outside this one (the sandbox)."""
    if spec.startswith("^"):
        return _fact(True, f"{spec}: an exclusion list, nothing to look for")
    have = sorted(name for _, name in socket.if_nameindex())
    problems, states = [], []
    for name in (n.strip().lstrip("=") for n in spec.split(",") if n.strip()):
        if name not in have:
            problems.append(f"{name} missing")
            continue
        up = _is_up(name)
        states.append(f"{name} {'up' if up else 'down'}")
        if not up:
            problems.append(f"{name} is down")
    if problems:
        return _fact(False, f"{'; '.join(problems)} (have: {', '.join(have) or 'none'})")
    return _fact(True, ", ".join(states))


def _is_up(name: str) -> bool:
    import fcntl
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14s", name.encode()[:15], 0, b"")
        flags = struct.unpack("16sH14s", fcntl.ioctl(sock.fileno(), 0x8913, request))[1]  # SIOCGIFFLAGS
    return bool(flags & 0x1 and flags & 0x40)  # IFF_UP and IFF_RUNNING


def port(port_low: int, port_high: int, job_id: int) -> dict[str, Any]:
    """Whether this job's ports (derived as the job script does: rendezvous, vLLM server, weight
    sync) can be bound here."""
    first = job_port(port_low, port_high, job_id)
    slots = port_slots(port_low, port_high)
    how = f"{first}-{first + PORTS_PER_JOB - 1} = {port_low} + (job {job_id} % {slots}) x {PORTS_PER_JOB}"
    for number in range(first, first + PORTS_PER_JOB):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as torch's TCPStore does
            try:
                sock.bind(("", number))
            except OSError as err:
                return _fact(False, f"port {number} of {how} is taken: {err.strerror or err}")
    busy = _listening_ports(port_low, port_high)
    return _fact(
        True, f"ports {how} are free" + (f"; {busy} other port(s) of the range listen" if busy else "")
    )


def _listening_ports(low: int, high: int) -> int:
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) > 3 and cols[3] == "0A":  # LISTEN
                number = int(cols[1].rsplit(":", 1)[1], 16)
                if low <= number <= high:
                    ports.add(number)
    return len(ports)


def write_token(path: Path, token: str) -> dict[str, Any]:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(token)
        os.replace(tmp, path)  # the reader never sees a half-written token
    except OSError as err:
        return _fact(False, f"cannot write {path}: {err.strerror or err}")
    return _fact(True, f"wrote {path}")


def read_token(path: Path, token: str, wait_s: float, writer: str) -> dict[str, Any]:
    """Wait for the first node's token file; a private /tmp or a non-shared mount never shows it."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            if path.read_text() == token:
                path.unlink(missing_ok=True)
                return _fact(True, f"read the token {writer} wrote in {path.parent}")
        except OSError:
            pass
        if time.monotonic() > deadline:
            return _fact(
                False,
                f"{path} written on {writer} not seen here after {wait_s:g} s: {path.parent} is not shared",
            )
        time.sleep(0.5)


def gpus(expected: int, env: dict[str, str] | None = None) -> dict[str, Any]:
    """GPUs this task may use: Slurm's CUDA_VISIBLE_DEVICES where set (nvidia-smi lists every GPU
    of the host, also those given to other jobs or nodes), else nvidia-smi -L, else torch when GPUs
    are expected, else none."""
    visible = (env if env is not None else dict(os.environ)).get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [v for v in visible.split(",") if v.strip() and v.strip() != "-1"]
        return {"count": len(ids), "source": f"CUDA_VISIBLE_DEVICES={visible}"}
    smi = shutil.which("nvidia-smi")
    if smi is not None:
        try:
            out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30).stdout
            return {
                "count": sum(line.startswith("GPU ") for line in out.splitlines()),
                "source": "nvidia-smi -L",
            }
        except (OSError, subprocess.TimeoutExpired) as err:
            return {"count": 0, "source": f"nvidia-smi failed: {err}"}
    if expected:
        try:
            import torch

            return {"count": int(torch.cuda.device_count()), "source": "torch.cuda.device_count()"}
        except Exception as err:  # any import-time failure of torch is the finding
            return {"count": 0, "source": f"no nvidia-smi, torch failed: {err}"}
    return {"count": 0, "source": "no nvidia-smi"}


def modules(loaded: str | None) -> dict[str, Any] | None:
    """The site modules as the node command loaded them before this probe started (lines "ok
    NAME" / "fail NAME" in HPC_GRPO_PROBE_MODULES); None when the profile has none."""
    if loaded is None:
        return None
    results = [line.split(" ", 1) for line in loaded.splitlines() if " " in line]
    good = [name for status, name in results if status == "ok"]
    bad = [name for status, name in results if status != "ok"]
    if bad:
        return _fact(False, f"module load failed: {', '.join(bad)}"
                            + (f" (loaded: {', '.join(good)})" if good else ""))
    return _fact(True, f"loaded {', '.join(good)}" if good else "no module to load")


def container(expected: str, env: dict[str, str]) -> dict[str, Any] | None:
    """Whether this probe runs inside the profile's container (None: the profile has none).

    Apptainer/Singularity mark their containers in the environment; pyxis does not, but srun
    fails the whole step when it cannot start the image, so a pyxis probe that reports at all ran
    inside it. The node command says when it found no runtime (HPC_GRPO_PROBE_CONTAINER)."""
    if not expected:
        return None
    said = env.get("HPC_GRPO_PROBE_CONTAINER", "")
    if said.startswith("missing"):
        return _fact(False, said)
    if expected == "apptainer":
        image = env.get("APPTAINER_CONTAINER") or env.get("SINGULARITY_CONTAINER")
        if not image:
            return _fact(False, "the probe ran outside the apptainer image")
        return _fact(True, f"inside the apptainer image {image}")
    return _fact(True, f"inside the {expected} image (srun --container-image)")


def disk(path: str) -> dict[str, Any]:
    """Free space of the file system holding path (its nearest existing parent)."""
    probe = existing_parent(Path(path or "."))
    return {"free": free_bytes(probe), "path": str(probe)}


def memory(meminfo: Path = Path("/proc/meminfo")) -> dict[str, Any]:
    """The node's memory and this job's cgroup limit (v2 memory.max, v1 limit_in_bytes)."""
    fields = {line.split(":")[0]: int(line.split()[1]) * 1024
              for line in meminfo.read_text().splitlines() if line.endswith("kB")}
    limit = None
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, rel = line.split(":", 2)
        base = Path("/sys/fs/cgroup")
        path = base / rel.lstrip("/") / "memory.max" if controllers == "" else \
            base / "memory" / rel.lstrip("/") / "memory.limit_in_bytes"
        if (controllers == "" or "memory" in controllers.split(",")) and path.exists():
            text = path.read_text().strip()
            if text.isdigit() and int(text) < fields["MemTotal"]:
                limit = int(text)
    return {"total": fields["MemTotal"], "available": fields.get("MemAvailable"),
            "cgroup_limit": limit}


def _safely(check: Callable[..., Any], *args: Any) -> Any:
    """A check that raises reports the error as its finding: one odd node must still report."""
    try:
        return check(*args)
    except Exception as err:
        return _fact(False, f"probe error: {type(err).__name__}: {err}")


def collect(args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    from hpc_grpo.runtime import probe_gpus  # here: doctor imports this module for PACKAGES only

    node_id = int(env.get("SLURM_NODEID", "0"))
    num_nodes = int(env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES") or "1")
    job_id = int(env.get("SLURM_JOB_ID", "0"))
    nodelist = env.get("SLURM_JOB_NODELIST", socket.gethostname())
    try:
        names, scontrol = node_names(nodelist, job_id)
    except Exception as err:  # a broken node list must not cost the other facts
        names, scontrol = [nodelist], _fact(False, f"probe error: {err}")
    report: dict[str, Any] = {
        "schema": 1,
        "node": socket.gethostname().split(".")[0],
        "node_id": node_id,
        "num_nodes": num_nodes,
        "job_id": job_id,
        "python": sys.version.split()[0],
        "hpc_grpo": __version__,
        "versions": versions(),
        "trl_vllm_requirement": trl_vllm_requirement(),
        "hosts": names,
        "resolve": _safely(resolve, names),
        "scontrol": scontrol,
        "gpus": _safely(gpus, args.gpus, env),
        "memory": _safely(memory),
        "slurm_memory_gib": slurm_memory_gib(env),
        "gpu_memory": _safely(probe_gpus.gpu_memory, args.gpus, env),
    }
    if args.share_dir:
        report["disk"] = _safely(disk, args.share_dir)
    if args.interface:
        report["interface"] = _safely(interface, args.interface)
    for key, fact in (("modules", _safely(modules, env.get("HPC_GRPO_PROBE_MODULES"))),
                      ("container", _safely(container, args.container, env))):
        if fact is not None:
            report[key] = fact
    token_path = Path(args.share_dir) / f".hpc-grpo-doctor-{args.token}" if args.share_dir else None
    writer = names[0] if names else "the first node"
    if node_id == 0:
        report["port"] = _safely(port, args.port_low, args.port_high, job_id)
        if token_path is not None:
            report["share_write"] = write_token(token_path, args.token)
    if node_id == num_nodes - 1 and token_path is not None:
        report["share_read"] = read_token(token_path, args.token, args.share_wait, writer)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hpc_grpo.runtime.probe")
    parser.add_argument("--interface", default="")
    parser.add_argument("--port-low", type=int, default=DEFAULT_PORT_RANGE[0])
    parser.add_argument("--port-high", type=int, default=DEFAULT_PORT_RANGE[1])
    parser.add_argument("--share-dir", default="")
    parser.add_argument("--token", default="token")
    parser.add_argument("--share-wait", type=float, default=30.0)
    parser.add_argument("--gpus", type=int, default=0, help="GPUs the profile expects per node")
    parser.add_argument("--container", default="", help="the profile's container runtime")
    args = parser.parse_args(argv)
    report = collect(args, dict(os.environ))
    print("\n".join(report_lines(report)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
