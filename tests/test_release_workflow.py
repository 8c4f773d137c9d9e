"""The release workflow (.github/workflows/release.yml) runs nothing that the rehearsal (scripts/release_rehearsal.sh)
does not also run: each step's command is one script of scripts/, and the rehearsal runs that script. PyPI gets
the artifacts by trusted publishing only (an OIDC token, no stored secret). scripts/lint_workflows.sh (check-jsonschema,
zizmor) checks the rest, in .ci/run and in the workflow's first job.
"""

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKFLOW = os.path.join(ROOT, ".github", "workflows", "release.yml")
REHEARSAL = os.path.join(ROOT, "scripts", "release_rehearsal.sh")
WATCH = os.path.join(ROOT, ".github", "workflows", "torch-watch.yml")


def run_commands():
    with open(WORKFLOW) as f:
        return [m.group(1).strip() for m in re.finditer(r"^\s+run: (.+)$", f.read(), re.M)]


def test_every_workflow_command_is_a_script_the_rehearsal_runs():
    commands = run_commands()
    assert len(commands) >= 5  # lint, build, check, wheel matrix, docs
    rehearsal = open(REHEARSAL).read()
    for command in commands:
        script = command.split()[0]
        assert re.fullmatch(r"scripts/[a-z_]+\.sh", script) and ";" not in command and "&&" not in command, \
            f"a workflow step runs more than one script: {command}"
        assert os.access(os.path.join(ROOT, script), os.X_OK), script
        assert f'"$repo/{script}"' in rehearsal, f"the rehearsal does not run {script}"


def test_pypi_publishing_is_trusted_publishing_without_a_stored_secret():
    text = open(WORKFLOW).read()
    publish = text[text.index("\n  publish:"):text.index("\n  docs:")]
    assert "id-token: write" in publish and re.search(r"pypa/gh-action-pypi-publish@[0-9a-f]{40}  # v1\.", publish)
    assert "secrets." not in text and "password" not in text
    assert re.search(r"^on:\n  push:\n    tags: \[\"v\*\"\]", text, re.M), "runs on a version tag only"
    # the torch watch starts it by hand on the tag it pushed: the first job, which every other one needs,
    # refuses any other ref
    jobs = text[text.index("\njobs:\n"):]
    first = jobs[:jobs.index("\n    steps:")]
    assert "startsWith(github.ref, 'refs/tags/v')" in first and "needs:" not in first
    assert re.search(r"^  build:\n(    .*\n)*?    needs: lint$", text, re.M)


def test_the_torch_watch_runs_its_rehearsed_script_and_builds_with_no_write_permission():
    text = open(WATCH).read()
    watch = text[text.index("\n  watch:"):text.index("\n  release:")]
    assert "python3 scripts/torch_watch.py" in watch and "scripts/torch_watch.py" in \
        open(os.path.join(ROOT, "scripts", "torch_watch_rehearsal.sh")).read()
    assert re.search(r"^permissions: \{\}$", text, re.M) and "contents: read" in watch and ": write" not in watch
    assert "release.yml" in text[text.index("\n  release:"):text.index("\n  report:")]
    # no ${{ }} inside a run: script (template injection); values reach the shell through env
    for block in re.findall(r"^( +)run: \|\n((?:\1  .*\n|\n)+)", text, re.M):
        assert "${{" not in block[1]


def jobs_of(text):
    """{job name: its text} of a workflow."""
    body = text[text.index("\njobs:\n"):]
    names = re.findall(r"^  ([a-z-]+):$", body, re.M)
    starts = [body.index(f"\n  {name}:\n") for name in names] + [len(body)]
    return {name: body[start:end] for name, start, end in zip(names, starts, starts[1:])}


def test_the_wheel_matrix_rows_come_from_the_index_not_from_the_workflow():
    text = open(WORKFLOW).read()
    jobs = jobs_of(text)
    assert "run: scripts/release_matrix.sh" in jobs["matrix"]
    assert "include: ${{ fromJSON(needs.matrix.outputs.include) }}" in jobs["wheel-matrix"]
    for job in ("matrix", "wheel-matrix"):
        assert not re.search(r"\b2\.\d+\.\d+\b", jobs[job]), f"a torch version written in release.yml's {job}"


def test_a_failed_release_opens_an_issue():
    jobs = jobs_of(open(WORKFLOW).read())
    report = jobs["report"]
    needs = re.search(r"needs: \[(.*)\]", report).group(1).split(", ")
    assert set(needs) == set(jobs) - {"report"} and "if: failure()" in report
    assert "issues: write" in report and 'run: scripts/file_issues.sh --release-failed "$TAG"' in report


def test_the_torch_watch_proposes_the_post_release_commit_to_main_and_files_issues_once():
    jobs = jobs_of(open(WATCH).read())
    assert "src/scripts/torch_watch_release.sh watch/release.bundle" in jobs["release"]
    assert "pull-requests: write" in jobs["release"]
    assert 'src/scripts/file_issues.sh "${issues[@]}"' in jobs["report"] and "gh issue" not in jobs["report"]
    release = open(os.path.join(ROOT, "scripts", "torch_watch_release.sh")).read()
    assert "gh pr create" in release and "--base \"$base\"" in release and "base=${BASE:-main}" in release
