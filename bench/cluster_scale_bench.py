"""The scale of a three-broker cluster: many partitions, replication factor 3, and its failovers.

`python bench/cluster_scale_bench.py [--partitions N] [--per-topic N] [--idle-seconds S] [--profile DIR]`

ZooKeeper and three `rill broker` processes on this machine (rill.testing.cluster.TestCluster, with its settings:
ZooKeeper session timeout 4 s, replica.fetch.wait.max.ms 200). Topics of `--per-topic` partitions, replication
factor 3, are created one CreateTopics after another until `--partitions` partitions (three times as many
replicas) exist (one answered REQUEST_TIMED_OUT, "written, not yet in effect", is waited for until every partition of
it has a leader). Reported: the time to create them and until every partition's ISR is complete; the brokers'
CPU (user + system, % of one core each) over `--idle-seconds` without any client, and their resident memory
per replica; controller failover: SIGKILL to the controller, the time until another broker is controller and
until every partition has a live leader (both as Metadata from the surviving brokers shows them); its restart:
the time until it listens and until it is back in the ISR of every partition; last, a clean stop (SIGTERM,
controlled shutdown) of the broker leading the most partitions, the controller aside: the time until it exits,
and whether every partition then has a leader elsewhere. Metadata is polled every `--poll` seconds, so the
failover times are that coarse.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ClusterMetadata, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import cpu_seconds, rss_kib
from bench.profiling import maybe_profile, render, summarize
from rill.testing.cluster import TestCluster

STARTUP_TIMEOUT_S = 1800.0


def _metadata(admin: AdminClient, topics: list[str]) -> ClusterMetadata | None:
    try:
        md = admin.list_topics(timeout=60)
    except Exception:  # a broker gone meanwhile: asked again at the next poll
        return None
    return md if all(t in md.topics and md.topics[t].error is None for t in topics) else None


def _partitions(md: ClusterMetadata, topics: list[str]) -> list[tuple[int, list[int]]]:
    """(leader, ISR) of every partition of ``topics``."""
    return [(p.leader, list(p.isrs)) for t in topics for p in md.topics[t].partitions.values()]


def _wait(admin: AdminClient, topics: list[str], ok: Callable[[list[tuple[int, list[int]]]], bool],
          poll: float, timeout: float, what: str) -> float:  # fmt: skip
    """Seconds until ``ok`` holds for the partitions Metadata shows (polled every ``poll`` s)."""
    t0 = time.monotonic()
    while True:
        md = _metadata(admin, topics)
        if md is not None and ok(_partitions(md, topics)):
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            raise SystemExit(f"{what}: not within {timeout:.0f} s")
        time.sleep(poll)


def _controller_from(admin: AdminClient, not_: int) -> int:
    try:
        cid = int(admin.list_topics(timeout=10).controller_id)
    except Exception:
        return -1
    return cid if cid != not_ else -1


def _cpu(c: TestCluster, seconds: float) -> list[float]:
    """Each broker's CPU over ``seconds``, in % of one core."""
    pids = {b: c.pid(b) for b in c.brokers}
    before = {b: sum(cpu_seconds(pid)) for b, pid in pids.items()}
    t0 = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - t0
    return [100 * (sum(cpu_seconds(pids[b])) - before[b]) / elapsed for b in c.brokers]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--per-topic", type=int, default=1_000)
    ap.add_argument("--idle-seconds", type=float, default=10.0)
    ap.add_argument("--poll", type=float, default=0.5, help="seconds between two Metadata requests while waiting")
    ap.add_argument("--timeout", type=float, default=1800.0, help="longest wait of any step, in seconds")
    ap.add_argument("--profile", type=Path, help="record broker 0 with py-spy while idle, into this directory")
    args = ap.parse_args()
    sizes = [args.per_topic] * (args.partitions // args.per_topic)
    if args.partitions % args.per_topic:
        sizes.append(args.partitions % args.per_topic)
    topics = [f"scale{i}" for i in range(len(sizes))]
    total = sum(sizes)
    rows: list[tuple[str, str]] = []

    def row(what: str, value: str) -> None:
        rows.append((what, value))
        print(f"  {what}: {value}", file=sys.stderr, flush=True)

    with TestCluster(3) as c:
        c.start()
        for b in c.brokers:
            c.broker(b).startup_timeout = STARTUP_TIMEOUT_S
        admin = AdminClient({"bootstrap.servers": c.bootstrap_servers, "log_level": 2})
        deadline = time.monotonic() + 120
        while _controller_from(admin, -1) < 0:
            if time.monotonic() > deadline:
                raise SystemExit("no controller within 120 s")
            time.sleep(0.2)
        rss0 = {b: rss_kib(c.pid(b)) for b in c.brokers}
        times: list[float] = []
        t_all = time.monotonic()
        timed_out = 0
        for name, n in zip(topics, sizes, strict=True):
            t = time.monotonic()
            try:
                for f in admin.create_topics([NewTopic(name, n, 3)], request_timeout=args.timeout).values():
                    f.result(args.timeout)
            except KafkaException as e:  # written, not in effect within the broker's wait: waited for here
                if e.args[0].code() != KafkaError.REQUEST_TIMED_OUT:
                    raise
                timed_out += 1
                _wait(admin, [name], lambda ps: all(leader >= 0 for leader, _ in ps), args.poll, args.timeout,
                      f"{name} in effect")  # fmt: skip
            times.append(time.monotonic() - t)
            print(f"  created {name} ({n}) in {times[-1]:.1f} s", file=sys.stderr, flush=True)
        row(f"create {len(sizes)} topics, {total:,} partitions RF 3", f"{sum(times):.1f} s (per CreateTopics "
            f"{min(times):.1f}-{max(times):.1f} s, last {times[-1]:.1f} s; {timed_out} answered REQUEST_TIMED_OUT, "
            "every partition with a leader then)")  # fmt: skip
        live = set(c.brokers)
        in_sync = _wait(admin, topics, lambda ps: all(len(isr) == 3 and leader >= 0 for leader, isr in ps),
                        args.poll, args.timeout, "every ISR complete")  # fmt: skip
        row("then until every ISR holds all 3 replicas", f"{in_sync:.1f} s (from the last CreateTopics' answer, "
            f"{time.monotonic() - t_all:.0f} s from the first)")  # fmt: skip
        time.sleep(3)  # the fetchers' sessions settle
        out = args.profile / f"idle-{total}.txt" if args.profile else None
        with maybe_profile(c.pid(0), out):
            cpu = _cpu(c, args.idle_seconds)
        if out is not None and out.exists():
            print(render(f"broker 0, idle ({out})", summarize(out, top=25)), file=sys.stderr, flush=True)
        row(f"idle CPU, {args.idle_seconds:g} s without clients", ", ".join(f"{x:.1f}%" for x in cpu)
            + " of a core (brokers 0, 1, 2)")  # fmt: skip
        rss = {b: rss_kib(c.pid(b)) for b in c.brokers}
        per = sum(rss[b] - rss0[b] for b in c.brokers) / (3 * total)
        row("resident memory per replica", f"{per:.1f} KiB ({', '.join(f'{rss[b] // 1024}' for b in c.brokers)}"
            " MiB per broker)")  # fmt: skip

        # controller failover
        controller = c.controller()
        led = sum(1 for leader, _ in _partitions(_metadata(admin, topics) or _fail("Metadata"), topics)
                  if leader == controller)  # fmt: skip
        others = sorted(live - {controller})
        survivors = AdminClient({"bootstrap.servers": ",".join(c.broker(b).bootstrap_servers for b in others),
                                 "log_level": 2})  # fmt: skip
        outs = {b: args.profile / f"failover-{b}-{total}.txt" if args.profile else None for b in others}
        with contextlib.ExitStack() as profiles:
            for b in others:
                profiles.enter_context(maybe_profile(c.pid(b), outs[b]))
            t0 = time.monotonic()
            c.kill(controller)
            while _controller_from(survivors, controller) < 0:
                if time.monotonic() - t0 > args.timeout:
                    raise SystemExit("no new controller")
                time.sleep(0.1)
            t_ctrl = time.monotonic() - t0
            _wait(survivors, topics, lambda ps: all(leader in others for leader, _ in ps), args.poll, args.timeout,
                  "every partition led by a live broker")  # fmt: skip
            t_lead = time.monotonic() - t0
        for b, out in outs.items():
            if out is not None and out.exists():
                print(render(f"broker {b}, failover ({out})", summarize(out, top=25)), file=sys.stderr, flush=True)
        row(f"SIGKILL the controller (broker {controller}, leader of {led:,})",
            f"new controller in {t_ctrl:.1f} s, every partition led by a live broker in {t_lead:.1f} s")
        t0 = time.monotonic()
        c.start(controller)
        t_listen = time.monotonic() - t0
        _wait(survivors, topics, lambda ps: all(controller in isr for _, isr in ps), args.poll, args.timeout,
              "back in every ISR")  # fmt: skip
        row(f"restart broker {controller}", f"listening after {t_listen:.1f} s, in every ISR after "
            f"{time.monotonic() - t0:.1f} s")  # fmt: skip

        # clean stop of the broker that leads the most partitions, the controller aside
        controller = c.controller()
        leaders = [leader for leader, _ in _partitions(_metadata(admin, topics) or _fail("Metadata"), topics)]
        victim = max((b for b in c.brokers if b != controller), key=leaders.count)
        led = leaders.count(victim)
        rest = sorted(live - {victim})
        remaining = AdminClient({"bootstrap.servers": ",".join(c.broker(b).bootstrap_servers for b in rest),
                                 "log_level": 2})  # fmt: skip
        t0 = time.monotonic()
        c.broker(victim).stop(timeout=args.timeout)
        t_exit = time.monotonic() - t0
        md = _metadata(remaining, topics)
        still = -1 if md is None else sum(1 for leader, _ in _partitions(md, topics) if leader not in rest)
        _wait(remaining, topics, lambda ps: all(leader in rest for leader, _ in ps), args.poll, args.timeout,
              "leaders moved")  # fmt: skip
        row(f"clean stop of broker {victim} (leader of {led:,})", f"exited after {t_exit:.1f} s; then "
            f"{still} partitions without a live leader, none after {time.monotonic() - t0:.1f} s")  # fmt: skip
        if args.profile:  # the brokers' logs beside the profiles (the cluster's directory goes with it)
            for b in c.brokers:
                log_path = c.broker(b).log_path
                if log_path is not None and log_path.exists():
                    shutil.copy(log_path, args.profile / f"broker-{b}-{total}.log")
    print(f"| three brokers, {total:,} partitions RF 3 ({3 * total:,} replicas) | |\n| --- | --- |")
    for what, value in rows:
        print(f"| {what} | {value} |")
    sys.stdout.flush()


def _fail(what: str) -> ClusterMetadata:
    raise SystemExit(f"{what} failed")


if __name__ == "__main__":
    main()
