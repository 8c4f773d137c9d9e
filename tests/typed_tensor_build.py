"""Builds tests/typed_tensor_module.cpp once per binding library (the nanobind one with -DTDB_USE_NANOBIND):
the module behind tests/test_typed_tensor.py and tests/test_binding_matrix.py (the `typed_modules` fixture in
conftest.py builds both flavours once per session, two compiler processes at once)."""
import os
import shutil
import subprocess
import sysconfig

HERE = os.path.dirname(os.path.abspath(__file__))
INCLUDE = os.path.join(os.path.dirname(HERE), "torch_dlpack_bridge", "include")
SOURCE = os.path.join(HERE, "typed_tensor_module.cpp")
FLAVOURS = ["pybind11", "nanobind"]


def binding_flags(flavour):
    """(compiler flags, extra sources) for one binding library."""
    if flavour == "pybind11":
        import pybind11

        return [f"-isystem{pybind11.get_include()}"], []
    import nanobind

    inc = nanobind.include_dir()
    robin = os.path.join(os.path.dirname(inc), "ext", "robin_map", "include")
    # -fvisibility=hidden as nanobind's own build sets it: without it two such modules in one process share
    # robin_map's function-local statics (STB_GNU_UNIQUE), and the second module's first class crashed nanobind.
    # NB_FREE_THREADED on a free-threaded CPython, as nanobind_add_module(FREE_THREADED) sets it: nanobind's own
    # state gets its locks and the module declares that it runs without the GIL (else importing it turns it on).
    free_threaded = ["-DNB_FREE_THREADED"] if sysconfig.get_config_var("Py_GIL_DISABLED") else []
    return ["-DTDB_USE_NANOBIND", *free_threaded, "-fvisibility=hidden", f"-isystem{inc}", f"-isystem{robin}"], [
        os.path.join(os.path.dirname(inc), "src", "nb_combined.cpp")]


def compiler():
    """The C++ compiler on PATH, or None."""
    return shutil.which("c++") or shutil.which("g++")


def base_cmd(flavour):
    flags, _ = binding_flags(flavour)
    return [compiler(), "-std=c++17", f"-I{sysconfig.get_paths()['include']}", f"-I{INCLUDE}", *flags]


def build(workdir, source=SOURCE, prefix="tdb_typed"):
    """{flavour: path of the built module <prefix>_<flavour>}, both compiled at once from `source` (tests/test_outputs.py
    builds tests/outputs_module.cpp with it)."""
    procs = {}
    for flavour in FLAVOURS:
        name = f"{prefix}_{flavour}"
        _, extra = binding_flags(flavour)
        out = os.path.join(str(workdir), name + sysconfig.get_config_var("EXT_SUFFIX"))
        cmd = base_cmd(flavour) + ["-O1", "-fPIC", "-shared", f"-DTDB_MODULE={name}", source, *extra, "-o", out]
        if flavour == "nanobind":
            cmd.insert(-2, f"-DNB_DOMAIN={name}")
        procs[flavour] = (out, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    result = {}
    for flavour, (out, proc) in procs.items():
        output = proc.communicate(timeout=900)[0]
        assert proc.returncode == 0, output
        result[flavour] = out
    return result
