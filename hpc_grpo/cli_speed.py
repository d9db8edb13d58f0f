"""The plan command's tail: the chosen layout's predicted s/step and tokens/s, every other
layout tried and why it lost, server mode's trainer/server memory, the checkpoint line and its save's time."""

from __future__ import annotations

from typing import Any


def speed_tables(console: Any, data: dict[str, Any]) -> None:
    from rich.table import Table

    speed, server = data.get("speed"), data.get("server_plan")
    if server:
        console.print(f"server mode: predicted {server['s_per_step']:.2f} s/step, "
                      f"{server['tokens_per_s']:,} tokens/s ({server['hardware']})"
                      + (f"; does not fit: {server['problem']}" if server["problem"] else ""))
        memory = Table(box=None, header_style="bold")
        memory.add_column("server mode")
        memory.add_column("GiB", justify="right")
        for side in ("trainer_gpu_gib", "server_gpu_gib"):
            for item, gib in server[side].items():
                memory.add_row(f"{side.split('_')[0]} GPU: {item}", f"{gib:.1f}")
        if server.get("trainer_node_cpu_gib"):  # the offloaded optimizer, per trainer node
            memory.add_row("trainer node: CPU memory", f"{server['trainer_node_cpu_gib']:.1f}")
        console.print(memory)
    if not speed:
        return
    console.print(f"predicted: {speed['s_per_step']:.2f} s/step, {speed['tokens_per_s']:,} "
                  f"tokens/s ({speed['hardware']})")
    rows = Table(box=None, header_style="bold")
    for column in ("layout tried", "s/step", "tokens/s", "verdict"):
        rows.add_column(column, overflow="fold")
    for row in speed["considered"]:
        rows.add_row(row["layout"], f"{row['s_per_step']:.2f}", f"{row['tokens_per_s']:,}",
                     row["verdict"])
    console.print(rows)


def plan_tail(console: Any, data: dict[str, Any]) -> None:
    speed_tables(console, data)
    if data.get("step_time"):  # measured on this site, predicted, or an extrapolation
        console.print(data["step_time"]["line"])
    ckpt = data.get("checkpoint")
    if ckpt:
        kept = f"{ckpt['at_once']} at once while saving ({ckpt['peak_disk_gib']:.1f} GiB)" \
            if ckpt["at_once"] else "all kept (save_total_limit unset)"
        console.print(f"checkpoint: {ckpt['one_gib']:.1f} GiB each, {kept}; a save needs "
                      f"{ckpt['save_host_gib']:.1f} GiB of host memory on rank 0's node")
    for line in (data.get("save") or {}).get("lines", ()):
        console.print(line)
    if data.get("machine"):  # a local site's figures, read from this machine
        console.print(data["machine"])
    links = data.get("links") or {}
    for line in [links.get("line"), *([f"warning: {links['note']}"] if links.get("note") else [])]:
        if line:
            console.print(line)
