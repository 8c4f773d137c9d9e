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
