"""prereq.require: skips locally, fails under CI=true (so CI cannot pass by skipping)."""
import subprocess
import sys
import textwrap


def run_pytest(tmp_path, ci):
    t = tmp_path / "test_needs_file.py"
    t.write_text(textwrap.dedent("""
        from prereq import require_file
        def test_x():
            require_file("/nonexistent/mimo-prereq-probe", "made up")
    """))
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(__import__("os").path.dirname(__file__))}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(t)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)


def test_missing_file_skips_locally(tmp_path):
    p = run_pytest(tmp_path, None)
    assert p.returncode == 0 and "1 skipped" in p.stdout, p.stdout


def test_missing_file_fails_under_ci(tmp_path):
    p = run_pytest(tmp_path, "true")
    assert p.returncode == 1 and "1 failed" in p.stdout, p.stdout
    assert "prerequisite missing under CI=true" in p.stdout and "/nonexistent/mimo-prereq-probe" in p.stdout
