"""Publishing the table on torch.Tensor: the import-time policy, install()/uninstall(), the environment
variable, inheritance by subclasses and nn.Parameter, the table's own header, and the ABI guard.

Names: `__dlpack_c_exchange_api__` (DLPack 1.3, a PyCapsule "dlpack_exchange_api") and
`__c_dlpack_exchange_api__` (DLPack 1.2, an int). Tests that change the policy restore the default one;
tests of a fresh import run in a subprocess.
"""

import ctypes
import json
import struct
import textwrap

import pytest
import torch

import torch_dlpack_bridge
from conftest import run_python
from torch_dlpack_bridge import CAPSULE_ATTR, INT_ATTR

OURS, TORCH = "torch_dlpack_bridge", "torch"
# The default policy publishes ours under both names on every torch. torch >= 2.10 ships a table of its own,
# which prefer="torch" keeps; an older torch has none, and prefer="torch" publishes ours there too.
HAS_NATIVE = torch_dlpack_bridge._native_capsule() is not None
DEFAULT = OURS
PREFER_TORCH = TORCH if HAS_NATIVE else OURS

_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_get_name = ctypes.pythonapi.PyCapsule_GetName
_get_name.restype = ctypes.c_char_p
_get_name.argtypes = [ctypes.py_object]


def pointer(capsule):
    """The DLPackExchangeAPI* a consumer gets from a capsule (checking the capsule's name)."""
    return _get_pointer(capsule, b"dlpack_exchange_api")


def published(cls=torch.Tensor):
    """(address behind the capsule name, value of the int name) as a consumer reads them on `cls`."""
    return pointer(getattr(cls, CAPSULE_ATTR)), getattr(cls, INT_ATTR)


@pytest.fixture
def restore_default():
    yield
    torch_dlpack_bridge.install()


class TorchFunctionSubclass(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return super().__torch_function__(func, types, args, kwargs or {})


INHERITORS = {"parameter": torch.nn.Parameter, "subclass": TorchFunctionSubclass}


def instance_of(cls):
    t = torch.arange(4.0)
    return torch.nn.Parameter(t) if cls is torch.nn.Parameter else t.as_subclass(cls)


# ---- the table itself -------------------------------------------------------------------------------

def test_exchange_api_is_a_named_capsule_of_the_table_address():
    capsule = torch_dlpack_bridge.exchange_api()
    assert _get_name(capsule) == b"dlpack_exchange_api"
    assert pointer(capsule) == torch_dlpack_bridge.exchange_api_address() != 0


def test_exchange_api_is_the_same_static_table_every_call():
    assert pointer(torch_dlpack_bridge.exchange_api()) == pointer(torch_dlpack_bridge.exchange_api())


def test_table_header_is_version_1_3_without_previous_api_and_all_functions_set(probe):
    raw = probe.read(torch_dlpack_bridge.exchange_api_address(), 56)
    major, minor, prev_api, *functions = struct.unpack("<IIQ5Q", raw)
    assert (major, minor, prev_api) == (1, 3, 0)
    assert all(functions), "every function pointer is set (dltensor_from_py_object_no_sync included)"


# ---- default policy ---------------------------------------------------------------------------------

def test_default_policy_publishes_ours_under_both_names_even_beside_a_native_table():
    """Whatever the torch (with or without a table of its own): importing the package turns ours on."""
    ours = torch_dlpack_bridge.exchange_api_address()
    assert published() == (ours, ours)
    assert torch_dlpack_bridge.active_provider() == {CAPSULE_ATTR: OURS, INT_ATTR: OURS}
    assert _get_name(torch.Tensor.__dict__[CAPSULE_ATTR]) == b"dlpack_exchange_api"


def test_prefer_torch_keeps_native_capsule_and_points_int_name_at_it(native, restore_default):
    torch_dlpack_bridge.install(prefer="torch")
    assert torch.Tensor.__dict__[CAPSULE_ATTR] is native
    assert published() == (pointer(native), pointer(native))
    assert torch_dlpack_bridge.active_provider() == {CAPSULE_ATTR: TORCH, INT_ATTR: TORCH}


def test_prefer_torch_without_a_native_table_publishes_ours(restore_default):
    torch_dlpack_bridge.install(prefer="torch")
    assert torch_dlpack_bridge.active_provider() == {CAPSULE_ATTR: PREFER_TORCH, INT_ATTR: PREFER_TORCH}


def test_consumer_finds_a_working_table_under_both_names(probe):
    t = torch.arange(6.0)
    by_capsule = probe.dltensor(type(t).__dlpack_c_exchange_api__, t)
    by_int = probe.dltensor(type(t).__c_dlpack_exchange_api__, t)
    assert by_capsule == by_int and by_capsule[0] == t.data_ptr()


# ---- install / uninstall ----------------------------------------------------------------------------

def test_install_bridge_publishes_ours_under_both_names(bridge_published):
    ours = torch_dlpack_bridge.exchange_api_address()
    assert published() == (ours, ours)
    assert torch_dlpack_bridge.active_provider() == {CAPSULE_ATTR: OURS, INT_ATTR: OURS}


def test_install_bridge_capsule_is_named_for_consumers(bridge_published):
    assert _get_name(torch.Tensor.__dlpack_c_exchange_api__) == b"dlpack_exchange_api"


def test_install_torch_after_bridge_restores_native(native, restore_default):
    torch_dlpack_bridge.install(prefer="bridge")
    torch_dlpack_bridge.install(prefer="torch")
    assert torch.Tensor.__dict__[CAPSULE_ATTR] is native
    assert published() == (pointer(native), pointer(native))


def test_install_is_idempotent(restore_default):
    torch_dlpack_bridge.install(prefer="bridge")
    first = published()
    torch_dlpack_bridge.install(prefer="bridge")
    assert published() == first


@pytest.mark.parametrize("prefer", ["nonsense", "Bridge", "native"])
def test_install_rejects_unknown_preference_and_changes_nothing(prefer, bridge_published):
    before = published()
    with pytest.raises(ValueError, match="prefer"):
        torch_dlpack_bridge.install(prefer=prefer)
    assert published() == before


def test_install_with_empty_preference_applies_default_policy(bridge_published):
    torch_dlpack_bridge.install(prefer="")
    assert torch_dlpack_bridge.active_provider() == {CAPSULE_ATTR: DEFAULT, INT_ATTR: DEFAULT}


def test_uninstall_removes_int_name_and_keeps_native_capsule(native, restore_default):
    torch_dlpack_bridge.install(prefer="bridge")
    torch_dlpack_bridge.uninstall()
    assert INT_ATTR not in torch.Tensor.__dict__
    assert not hasattr(torch.Tensor, INT_ATTR)
    assert torch.Tensor.__dict__[CAPSULE_ATTR] is native
    assert torch_dlpack_bridge.active_provider() == {CAPSULE_ATTR: TORCH, INT_ATTR: None}


def test_uninstall_twice_is_harmless(native, restore_default):
    torch_dlpack_bridge.uninstall()
    torch_dlpack_bridge.uninstall()
    assert torch.Tensor.__dict__[CAPSULE_ATTR] is native and INT_ATTR not in torch.Tensor.__dict__


def test_uninstall_in_fresh_process_restores_exactly_what_torch_had():
    result = run_python(textwrap.dedent("""
        import json, torch
        names = ("__dlpack_c_exchange_api__", "__c_dlpack_exchange_api__")
        missing = object()
        before = {n: torch.Tensor.__dict__.get(n, missing) for n in names}
        import torch_dlpack_bridge as b
        b.install(prefer="bridge")
        b.install(prefer="torch")
        b.install(prefer="bridge")
        b.uninstall()
        after = {n: torch.Tensor.__dict__.get(n, missing) for n in names}
        print(json.dumps({n: [before[n] is missing, after[n] is missing, before[n] is after[n]] for n in names}))
    """))
    assert result.returncode == 0, result.stderr[-3000:]
    state = json.loads(result.stdout.splitlines()[-1])
    # torch >= 2.10: torch's capsule object is back; older torch: the capsule name is absent again
    assert state[CAPSULE_ATTR] == [not HAS_NATIVE, not HAS_NATIVE, True], "the capsule name is as torch had it"
    assert state[INT_ATTR] == [True, True, True], "the int name is absent again, as torch had it"


# ---- inheritance ------------------------------------------------------------------------------------

@pytest.mark.parametrize("prefer", ["torch", "bridge"])
@pytest.mark.parametrize("kind", list(INHERITORS))
def test_subclasses_and_parameter_inherit_published_table(probe, prefer, kind, restore_default):
    torch_dlpack_bridge.install(prefer=prefer)
    cls = INHERITORS[kind]
    assert CAPSULE_ATTR not in cls.__dict__ and INT_ATTR not in cls.__dict__
    assert published(cls) == published(torch.Tensor)
    assert torch_dlpack_bridge.active_provider(cls) == torch_dlpack_bridge.active_provider(torch.Tensor)
    x = instance_of(cls)
    assert probe.dltensor(type(x).__dlpack_c_exchange_api__, x)[0] == x.data_ptr()
    assert probe.export(type(x).__c_dlpack_exchange_api__, x).info()[0] == x.data_ptr()


# ---- fresh imports ----------------------------------------------------------------------------------

PROVIDERS_SCRIPT = textwrap.dedent("""
    import ctypes, json, torch
    import torch_dlpack_bridge as b
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    def state():
        ours = b.exchange_api_address()
        return {"providers": b.active_provider(),
                "capsule_is_ours": get(torch.Tensor.__dlpack_c_exchange_api__, b"dlpack_exchange_api") == ours,
                "int_is_ours": torch.Tensor.__c_dlpack_exchange_api__ == ours}
    at_import = state()
    b.install(prefer="torch")
    print(json.dumps({"at_import": at_import, "after_explicit_torch": state()}))
""")


def providers_in_fresh_process(**env):
    result = run_python(PROVIDERS_SCRIPT, **env)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


@pytest.mark.parametrize("value", ["bridge", ""])
def test_environment_variable_bridge_or_empty_gives_default_policy(value):
    state = providers_in_fresh_process(TORCH_DLPACK_BRIDGE_PREFER=value)
    assert state["at_import"] == {"providers": {CAPSULE_ATTR: OURS, INT_ATTR: OURS},
                                  "capsule_is_ours": True, "int_is_ours": True}
    assert state["after_explicit_torch"]["providers"] == {CAPSULE_ATTR: PREFER_TORCH, INT_ATTR: PREFER_TORCH}, \
        "an explicit prefer= argument wins over the environment"


def test_environment_variable_torch_keeps_native_table_at_import():
    state = providers_in_fresh_process(TORCH_DLPACK_BRIDGE_PREFER="torch")
    assert state["at_import"] == {"providers": {CAPSULE_ATTR: PREFER_TORCH, INT_ATTR: PREFER_TORCH},
                                  "capsule_is_ours": not HAS_NATIVE, "int_is_ours": not HAS_NATIVE}


# ---- the autograd probe (this project's own attribute, for written typed parameters: autograd.h) --------------

@pytest.mark.parametrize("prefer", ["torch", "bridge"])
def test_install_publishes_the_autograd_probe_whichever_table_and_uninstall_removes_it(prefer, restore_default):
    torch_dlpack_bridge.install(prefer=prefer)
    capsule = torch.Tensor.__dict__["__tdb_autograd_probe__"]
    assert _get_pointer(capsule, b"torch_dlpack_bridge.autograd_probe")
    assert _get_pointer(torch.Tensor.__dict__["__tdb_version_bump__"], b"torch_dlpack_bridge.version_bump")
    assert _get_pointer(torch.Tensor.__dict__["__tdb_autograd_layout__"], b"torch_dlpack_bridge.autograd_layout")
    torch_dlpack_bridge.uninstall()
    for name in ("__tdb_autograd_probe__", "__tdb_version_bump__", "__tdb_autograd_layout__"):
        assert not hasattr(torch.Tensor, name)
