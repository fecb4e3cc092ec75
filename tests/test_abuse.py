"""Integration: the abuse suite's short version (`benchmarks/abuse.py --short`) against the
default `serve` of the tiny portable set: every attack beside honest clients, with the
bounds the front door promises."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from served import assemble_portable

pytestmark = pytest.mark.integration
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_WAIT = 2.0  # a short stated wait: the tiny set answers in milliseconds, so a flood must reach it


@pytest.fixture(scope="module")
def rows(tiny_artifacts, tmp_path_factory):
    folder = tmp_path_factory.mktemp("abuse")
    repo = assemble_portable(tiny_artifacts, str(folder / "repository"))
    out = folder / "abuse.json"
    done = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "benchmarks", "abuse.py"),
            "--repository",
            repo,
            "--short",
            "--json",
            str(out),
            "--max-wait",
            str(MAX_WAIT),
        ],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "| attack | honest success |" in done.stdout
    return {row["attack"]: row for row in json.loads(out.read_text())}


def _why(row: dict) -> str:
    """Everything a failed bound needs to be understood from CI's log alone."""
    keys = ("honest", "attack_counts", "crashes", "restarts", "events", "front", "memory_mb", "notes")
    return json.dumps({k: row.get(k) for k in keys}, indent=1)


def test_short_deadlines_crash_nothing_and_honest_clients_are_served(rows):
    row = rows["deadlines"]
    assert row["crashes"] == 0 and row["restarts"] == 0, _why(row)
    assert row["honest"]["success"] >= 0.9, _why(row)
    assert row["attack_counts"].get("deadline", 0) > 0  # the attack ran: its deadlines passed


def test_clients_that_send_and_close_leave_honest_clients_on_another_address_served(rows):
    row = rows["disconnects"]
    assert row["crashes"] == 0 and row["restarts"] == 0, _why(row)
    assert row["honest"]["success"] >= 0.8, _why(row)
    assert row["attack_counts"].get("sent_and_closed", 0) > 100
    assert row["front"]["dropped_before_compute"] + row["front"]["abandoned_after_send"] > 0


def test_a_flood_of_score_jobs_waits_within_the_stated_bound_and_loses_nothing(rows):
    row = rows["flood"]
    assert row["crashes"] == 0 and row["attack_counts"].get("jobs_failed", 0) == 0, _why(row)
    assert row["attack_counts"].get("jobs_ok", 0) >= 16, _why(row)
    front = row["front"]
    assert front["answer_seconds"]["p99"] <= 1.5 * MAX_WAIT, _why(row)
    assert front["expired"] == 0, _why(row)
    assert front["refused"]["busy"] + front["refused"]["share"] > 0, _why(row)  # it was full, and said so
    assert row["honest"]["success"] >= 0.9, _why(row)


def test_huge_messages_are_refused_as_client_errors_and_leave_memory_alone(rows):
    row = rows["huge"]
    counts = row["attack_counts"]
    assert counts.get("grpc_RESOURCE_EXHAUSTED") == 1 and counts.get("http_413") == 1, counts
    messages = counts.get("grpc_messages", []) + counts.get("http_messages", [])
    assert not any("readability-triton-" in m for m in messages)
    memory = row["memory_mb"]
    assert memory["end"] - memory["start"] <= 200 and row["crashes"] == 0


def test_a_killed_stub_is_healed_and_costs_few_requests(rows):
    row = rows["kill_stub"]
    assert row["restarts"] == 1 and row["attack_counts"].get("healed_after_s") is not None, _why(row)
    assert row["honest"]["requests"] == row["honest"]["ok"], _why(row)  # the door sends them once more


def test_sigterm_under_load_answers_every_request_in_flight(rows):
    row = rows["sigterm"]
    counts = row["attack_counts"]
    assert counts["exit_status"] == 0 and counts["cancelled"] == 0
    assert row["honest"]["success"] == 1.0, row["honest"]["errors"]


def test_no_run_showed_the_admin_key_to_another_user(rows):
    for row in rows.values():
        assert any(note.endswith("readable by another user: nowhere") for note in row["notes"]), row["notes"]


# -- the second round (benchmarks/attacks.py) ------------------------------------------------------


def test_words_that_say_a_stub_died_in_a_clients_request_hold_nothing(rows):
    row = rows["injection"]
    assert row["front"]["holds"] == 0 and row["restarts"] == 0, _why(row)
    assert row["honest"]["success"] >= 0.95, _why(row)
    counts = row["attack_counts"]
    assert counts.get("grpc_NOT_FOUND", 0) > 0 and counts.get("http_404", 0) > 0, counts  # the model of that name
    assert counts.get("grpc_INVALID_ARGUMENT", 0) + counts.get("http_400", 0) > 0, counts  # the input of that name


def test_generate_floods_are_refused_like_infer_floods(rows):
    row = rows["generate_flood"]
    assert row["honest"]["success"] >= 0.9, _why(row)
    counts, front = row["attack_counts"], row["front"]
    assert counts.get("http_200", 0) > 0, _why(row)
    # every /generate answered was admitted by the gate (the honest clients' requests too)
    assert front["accepted"] >= counts["http_200"] + row["honest"]["ok"], _why(row)


def test_idle_and_slowloris_connections_leave_room_for_everyone_else(rows):
    row = rows["idle_connections"]
    counts = row["attack_counts"]
    assert counts["livez_ok"] == counts["livez_checks"] > 0, _why(row)
    assert 0 < counts["serve_descriptors_max"] < counts["descriptor_limit"], _why(row)
    assert counts["serve_log_growth_kb"] < 1024, _why(row)
    assert counts["closed_by_server"] > 0, _why(row)  # the caps and timeouts closed what they had to
    assert row["honest"]["success"] >= 0.95, _why(row)
    assert row["crashes"] == 0, _why(row)


def test_a_declared_shape_of_two_billion_texts_is_refused_and_counts_nothing(rows):
    row = rows["shape_poison"]
    counts = row["attack_counts"]
    assert counts.get("INVALID_ARGUMENT", 0) > 0 and set(counts) == {"INVALID_ARGUMENT"}, counts
    assert row["honest"]["success"] >= 0.95 and row["front"]["refused"]["busy"] == 0, _why(row)


def test_long_texts_are_weighed_and_the_stated_wait_holds(rows):
    row = rows["long_texts"]
    assert row["attack_counts"].get("answered", 0) > 0, _why(row)
    assert row["front"]["answer_seconds"]["p99"] <= 1.5 * MAX_WAIT, _why(row)
    assert row["honest"]["success"] >= 0.8, _why(row)


def test_fifty_addresses_of_one_network_get_one_networks_share(rows):
    row = rows["sybil"]
    assert row["honest"]["success"] >= 0.5, _why(row)
    assert row["attack_counts"].get("http_200", 0) > 0, _why(row)


def test_a_frozen_tritonserver_is_seen_and_healed(rows):
    row = rows["freeze"]
    counts = row["attack_counts"]
    assert counts["not_ready_after_s"] is not None and counts["not_ready_after_s"] <= 15, _why(row)
    assert counts["healed_after_s"] is not None and row["restarts"] == 1, _why(row)
    assert row["honest"]["requests"] > 0 and row["honest"]["success"] == 1.0, _why(row)  # those sent after the heal


def test_new_method_names_keep_no_state(rows):
    row = rows["method_names"]
    counts = row["attack_counts"]
    assert counts.get("UNIMPLEMENTED", 0) > 1000, counts
    assert counts["serve_rss_mb_after"] - counts["serve_rss_mb_before"] < 20, counts
    assert row["honest"]["success"] >= 0.95, _why(row)


def test_a_rapid_reset_flood_cancels_no_other_clients_call(rows):
    row = rows["rapid_reset"]
    assert row["attack_counts"]["pairs_sent"] > 10_000, _why(row)
    assert row["honest"]["success"] >= 0.98 and row["honest"]["cancelled"] == 0, _why(row)
