"""The Slurm back end: the rendered script through sbatch (submitit's job role on the nodes), the
state from one batched sacct/squeue query, and actions taken only on a job proven this run's.

Every Slurm command itself runs in ``scheduler/slurm.py``; this module decides what to ask and
what an answer means for a run (``scheduler/identity``: a job is never taken by its number alone).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hpc_grpo.errors import UserError
from hpc_grpo.rundir.contract import SUBMITIT
from hpc_grpo.rundir.view import RunView, append_job_line
from hpc_grpo.scheduler import slurm
from hpc_grpo.scheduler.backend import Action, SideJob, Submission
from hpc_grpo.scheduler.identity import Match, match, of_submission
from hpc_grpo.scheduler.jobstate import JobView, slurm_view
from hpc_grpo.scheduler.slurm_records import JobRecord

if TYPE_CHECKING:  # the plan's type only: status and cancel never load the planner
    from hpc_grpo.planner.job import JobPlan


def _live(files: RunView, verb: str, what: str) -> tuple[JobRecord, Match] | None:
    """squeue's record of the run's job and whose job it is, None once Slurm no longer holds
    it; a UserError (nothing is done) where squeue cannot be asked."""
    job = files.identity
    assert job is not None and job.job_id  # the callers checked that there is a job
    try:
        record = slurm.live_record(job.job_id)
    except UserError as err:
        raise UserError(f"cannot check that job {job.job_id} {what}: {err.message}",
                        field="run", hint=f"nothing was {verb}; try again once squeue answers"
                        ) from err
    return None if record is None else (record, match(job, record))


def submitit_folder(run_dir: str) -> str:
    """Where submitit keeps the job's pickles and Slurm writes the node tasks' logs."""
    return f"{run_dir}/{SUBMITIT}"


# How long status waits for sacct and squeue (side by side): a slurmctld or slurmdbd that does
# not answer makes status show the run directories' state, said once, instead of hanging
# (issue #27: 9-18 s before). A cluster whose accounting is slower than this loses only the
# records of ended jobs for that call: the run directories still say how far training got.
STATUS_WAIT_S = 2.0


class SlurmBackend:
    name = "slurm"
    follow_by_default = False

    def check(self, plan: JobPlan) -> None:
        if not plan.site.max_nodes:  # a profile's own limit was already checked by the plan
            slurm.require_partition_nodes(plan.spec.partition or plan.site.partition, plan.nodes)

    def submit(self, *, script: str, run_dir: Path, plan: JobPlan, python: str) -> Submission:
        # only a submission pickles the node task: status and cancel never load the runtime
        from hpc_grpo.runtime.node.task import NodeTask

        job = slurm.submit_job(
            script_text=script, folder=Path(submitit_folder(str(run_dir))),
            task=NodeTask(str(run_dir)), nodes=plan.nodes, timeout_min=plan.time_min,
            max_requeues=plan.site.max_requeues, python=shlex.quote(python))
        return Submission(job.job_id, of_submission(job, str(run_dir)).fields())

    def views(self, runs: Sequence[RunView]) -> list[JobView]:
        ids = [i.job_id for f in runs if (i := f.identity) and i.job_id]
        records = slurm.query_records(ids, timeout=STATUS_WAIT_S)  # no ids: no call
        return [slurm_view(files, records) for files in runs]

    def refuse_if_alive(self, files: RunView, verb: str) -> None:
        """A UserError unless the run's own job is known to be over (gone from squeue, ended,
        or its id now another job's): a second job in the same run directory would train over
        the first. Where squeue cannot say (it fails, Slurm names no script, another cluster),
        refuse too."""
        identity = files.identity
        run = files.run_id
        if identity is None or not identity.job_id:
            return  # never submitted: nothing can be running
        job_id = identity.job_id
        found = _live(files, verb, f"of run {run} is over")
        if found is None:
            return
        record, verdict = found
        if verdict.verdict == "other":
            return
        if verdict.verdict == "elsewhere":
            raise UserError(f"run {run} belongs to another cluster: {verdict.why}", field="run",
                            hint=f"{verb} it from a login node of cluster {identity.cluster}")
        if verdict.verdict != "ours":
            raise UserError(f"cannot tell whether job {job_id} is run {run}'s: {verdict.why}",
                            field="run", hint=f"nothing was {verb}; check `scontrol show job {job_id}`")
        if not record.state.finished:
            raise UserError(f"run {run} is still {record.state.state} as job {job_id}", field="run",
                            hint=f"wait for it to end or `hpc-grpo cancel {run}` first")

    def _act(self, files: RunView, verb: str, act: Callable[[str, str], None]) -> Action:
        """Act on the run's job only after squeue shows that the job under its id is this run's.

        A job that is over, forgotten or now someone else's is left alone (``done`` False);
        where it cannot be told (squeue failing, Slurm not saying which script the job runs,
        another cluster) nothing is done and the reason is a UserError."""
        run = files.run_id
        job_id = files.identity.job_id if files.identity else ""
        found = _live(files, verb, f"is run {run}'s")
        if found is None:
            return Action(run, job_id, False, f"nothing {verb}: Slurm no longer has job {job_id} "
                          f"of run {run} (phase {files.state.phase or 'not started'})")
        record, verdict = found
        if verdict.verdict == "other":
            return Action(run, job_id, False, f"nothing {verb}: {verdict.why}; run {run}'s own "
                          f"job is over (phase {files.state.phase or 'not started'})")
        if verdict.verdict != "ours":
            raise UserError(f"cannot tell that job {job_id} is run {run}'s: {verdict.why}",
                            field="run", hint=f"nothing was {verb}; check `scontrol show job "
                            f"{job_id}` and use Slurm's own commands if it is")
        if record.state.finished:
            return Action(run, job_id, False,
                          f"nothing {verb}: job {job_id} of run {run} already ended ({record.state.state})")
        act(job_id, record.name)
        append_job_line(files.run_dir, job_id, verb)
        return Action(run, job_id, True, f"{verb} job {job_id} (run {run})")

    def cancel(self, files: RunView) -> Action:
        return self._act(files, "cancelled", lambda job, name: slurm.cancel(job, name=name))

    def signal(self, files: RunView, signal_name: str) -> Action:
        return self._act(files, "signalled",
                         lambda job, name: slurm.signal_job(job, signal_name, name=name))

    def requeue(self, files: RunView) -> Action:
        return self._act(files, "requeued", lambda job, _: slurm.requeue(job))

    def node_logs(self, run_dir: Path) -> list[Path]:
        return sorted((Path(run_dir) / SUBMITIT).glob("*_log.*"))

    def submit_side_job(self, job: SideJob) -> Submission:
        """sbatch of the script on one node, with the memory and time the job needs and the
        site's flags."""
        return Submission(slurm.submit_script(job.script, name=job.name, log=job.log,
                                              mem_mb=job.mem_mb, time_min=job.time_min,
                                              options=job.options))

    def side_job_state(self, job_id: str, script: Path) -> str:
        from hpc_grpo.scheduler.slurm_records import combine

        records = slurm.query_records([job_id], timeout=STATUS_WAIT_S)
        acct = records.acct.get(job_id) or []
        live = records.queue.get(job_id)
        state = combine(job_id, acct[-1].state if acct else None, live.state if live else None)
        return state.state
