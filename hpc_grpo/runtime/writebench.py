"""The on-node half of ``hpc-grpo doctor --output-bandwidth``: every rank writes at once.

``python -m hpc_grpo.runtime.writebench`` runs on every rank srun starts (N nodes x the site's
processes per node: SLURM_PROCID, SLURM_NTASKS, the host name), as the ranks of a checkpoint's
save write their parts:

1. each rank announces itself in a folder under the output root and waits for all the others
   (a barrier through the file system the checkpoints go to, which every node must share: the
   probe's "shared output" row checks that);
2. each writes ``--bytes-per-rank`` of random bytes (not compressible) in 64 MiB chunks to its
   own file, stopping early at ``--max-seconds`` with what it wrote, then fsyncs and closes it,
   and removes it; its host, bytes and the wall-clock start and end go to ``done.<rank>.json``;
3. rank 0 waits for every rank's record and prints one report (the probe's chunked lines):
   per node, the node's bytes over the time from its ranks' first start to their last end (one
   host's clock); in total, every byte over the slowest node's time; the free space of the file
   system (df) and the user's quota where the file system tells it (``lfs quota`` on Lustre,
   ``mmlsquota`` on GPFS); then removes the folder.

Stdlib only; bounded: a watchdog ends the process ``--max-seconds`` + 60 s after it starts.
"""

from __future__ import annotations

import argparse
import datetime
import getpass
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hpc_grpo.rundir.checkpoints import existing_parent, free_bytes
from hpc_grpo.runtime.probe_lines import report_lines
from hpc_grpo.runtime.shared.signals import give_up_after

KIND = "output_write"
MIB = 2**20
CHUNK = 64 * MIB
POLL_S = 0.05


def wait_for(folder: Path, prefix: str, count: int, deadline: float) -> int:
    """Wait until ``count`` files named ``prefix*`` are in ``folder`` or the deadline passes;
    how many there are."""
    while True:
        seen = sum(1 for p in folder.iterdir() if p.name.startswith(prefix))
        if seen >= count or time.monotonic() >= deadline:
            return seen
        time.sleep(POLL_S)


def write_share(path: Path, nbytes: int, budget_s: float, chunk: bytes) -> dict[str, Any]:
    """Write ``nbytes`` (or what ``budget_s`` allows) to ``path``, fsync, close, remove; the
    bytes and the wall-clock start and end (the fsync inside)."""
    start = time.time()
    written = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        while written < nbytes and time.time() - start < budget_s:
            view = memoryview(chunk)[:min(len(chunk), nbytes - written)]
            while view:
                done = os.write(fd, view)
                view, written = view[done:], written + done
        os.fsync(fd)
    finally:
        os.close(fd)
    end = time.time()
    path.unlink(missing_ok=True)
    return {"bytes": written, "start": start, "end": end, "cut_short": written < nbytes}


def summarize(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per node and in total from every rank's record (GB/s of 1e9 bytes)."""
    nodes: dict[str, list[Mapping[str, Any]]] = {}
    for record in records:
        nodes.setdefault(str(record["host"]), []).append(record)
    per_node: dict[str, dict[str, Any]] = {}
    spans: list[float] = []  # each node's seconds, unrounded: the total is computed from them
    for host, ranks in nodes.items():
        seconds = max(r["end"] for r in ranks) - min(r["start"] for r in ranks)
        nbytes = sum(int(r["bytes"]) for r in ranks)
        spans.append(seconds)
        per_node[host] = {"bytes": nbytes, "seconds": round(seconds, 3), "ranks": len(ranks),
                          "gbs": round(nbytes / seconds / 1e9, 3) if seconds > 0 else 0.0}
    slowest = max(spans, default=0.0)
    total = sum(n["bytes"] for n in per_node.values())
    return {"per_node": per_node,
            "gbs_per_node": min((n["gbs"] for n in per_node.values()), default=0.0),
            "total_gbs": round(total / slowest / 1e9, 3) if slowest > 0 else 0.0,
            "bytes": total, "cut_short": any(r.get("cut_short") for r in records)}


def mount_of(path: Path, mounts: str) -> tuple[str, str, str]:
    """(device, mount point, type) of the file system holding ``path`` from /proc/mounts' text:
    the longest mount point that contains it."""
    best = ("", "/", "")
    target = str(path)
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        device, point, kind = fields[0], fields[1].replace("\\040", " "), fields[2]
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best[1]):
            best = (device, point, kind)
    return best


def parse_quota(text: str, tool: str) -> dict[str, int] | None:
    """Used and limit bytes from ``lfs quota -q`` or ``mmlsquota --block-size 1K`` (both in
    KiB); the hard limit, else the soft one; None where no line reads or no limit is set."""
    for line in text.splitlines():
        fields = line.replace("*", "").replace("|", " ").split()
        numbers = fields[1:4] if tool == "lfs quota" else fields[2:5]
        if tool == "mmlsquota" and (len(fields) < 5 or fields[1] not in ("USR", "FILESET")):
            continue
        if len(numbers) < 3 or not all(n.isdigit() for n in numbers):
            continue
        used, soft, hard = (int(n) * 1024 for n in numbers)
        limit = hard or soft
        return {"used_bytes": used, "limit_bytes": limit} if limit else None
    return None


Runner = Callable[[list[str]], str]


def _run(argv: list[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=15, check=False)
    return done.stdout


def space(root: Path, mounts: str, run: Runner = _run) -> dict[str, Any]:
    """Free space (df) and the user's quota where the file system's own tool tells it."""
    where = existing_parent(root)
    device, point, kind = mount_of(where.resolve(), mounts)
    out: dict[str, Any] = {"fs_type": kind, "mount": point, "df_free_bytes": free_bytes(where),
                           "quota": None, "source": "df"}
    user = getpass.getuser()
    ask = {"lustre": ("lfs quota", ["lfs", "quota", "-q", "-u", user, point]),
           "gpfs": ("mmlsquota", ["mmlsquota", "-u", user, "--block-size", "1K",
                                  device.split("/")[-1]])}.get(kind)
    if ask is None or shutil.which(ask[1][0]) is None:
        return out
    try:
        quota = parse_quota(run(ask[1]), ask[0])
    except (OSError, subprocess.SubprocessError):
        quota = None
    if quota is not None:
        quota["free_bytes"] = max(0, quota["limit_bytes"] - quota["used_bytes"])
        out.update(quota=quota, source=ask[0])
    return out


def bench(args: argparse.Namespace, rank: int, world: int) -> dict[str, Any] | None:
    """This rank's part; rank 0's report (None on the other ranks)."""
    began = time.monotonic()
    folder = Path(args.dir) / f".hpc-grpo-writebench-{args.token}"
    folder.mkdir(parents=True, exist_ok=True)
    host = socket.gethostname()
    (folder / f"ready.{rank}").write_text(host)
    deadline = began + args.max_seconds
    if wait_for(folder, "ready.", world, deadline) < world:
        raise RuntimeError(f"only some ranks appeared in {folder} within {args.max_seconds:g} s: "
                           "is the output root shared by every node?")
    chunk = os.urandom(min(CHUNK, max(args.bytes_per_rank, 1)))
    record = {"rank": rank, "host": host,
              **write_share(folder / f"rank{rank}.bin", args.bytes_per_rank,
                            max(1.0, deadline - time.monotonic()), chunk)}
    tmp = folder / f".done.{rank}"
    tmp.write_text(json.dumps(record))
    tmp.rename(folder / f"done.{rank}.json")
    if rank != 0:
        return None
    wait_for(folder, "done.", world, time.monotonic() + 60)
    records = [json.loads(p.read_text()) for p in sorted(folder.glob("done.*.json"))]
    shutil.rmtree(folder, ignore_errors=True)
    if len(records) < world:
        raise RuntimeError(f"{world - len(records)} of {world} ranks did not finish writing")
    try:
        mounts = Path("/proc/mounts").read_text()
    except OSError:
        mounts = ""
    hosts = list(dict.fromkeys(str(r["host"]) for r in records))
    return {"kind": KIND, **summarize(records), "root": str(args.dir), "nodes": len(hosts),
            "procs_per_node": max(sum(r["host"] == h for r in records) for h in hosts),
            "hosts": hosts, "bytes_per_rank": args.bytes_per_rank, "space": space(
                Path(args.dir), mounts), "job_id": os.environ.get("SLURM_JOB_ID", ""),
            "elapsed_s": round(time.monotonic() - began, 2),
            "measured_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m hpc_grpo.runtime.writebench")
    parser.add_argument("--dir", required=True, help="the output root checkpoints go to")
    parser.add_argument("--token", required=True, help="names this measurement's folder")
    parser.add_argument("--bytes-per-rank", type=int, default=2**30)
    parser.add_argument("--max-seconds", type=float, default=120.0)
    parser.add_argument("--container", default="", help="accepted from doctor's node command")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    give_up_after(args.max_seconds + 60, "writebench")
    rank, world = int(os.environ.get("SLURM_PROCID", 0)), int(os.environ.get("SLURM_NTASKS", 1))
    try:
        report = bench(args, rank, world)
    except Exception as exc:  # one line doctor can show
        report = {"kind": KIND, "error": f"{type(exc).__name__}: {str(exc)[:300]}",
                  "host": socket.gethostname(), "rank": rank}
        print(f"writebench: rank {rank}: {report['error']}", file=sys.stderr, flush=True)
        if rank != 0:
            return 1
    if report is not None:
        for line in report_lines(report):
            print(line, flush=True)
    return 1 if report is not None and "error" in report else 0


if __name__ == "__main__":
    sys.exit(main())
