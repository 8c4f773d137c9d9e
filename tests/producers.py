"""Small Python DLPack producers for tests of the __dlpack__ fallback (they wrap NumPy arrays)."""


class LegacyOnly:
    """A producer that predates DLPack 1.0: __dlpack__(stream) only, returning an unversioned capsule."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, stream=None):
        return self.array.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


class Recording:
    """A producer that records the keyword arguments of each __dlpack__ call, reports `device`, and returns
    `result` if given (else the array's legacy capsule)."""

    def __init__(self, array, device=(1, 0), result=None):
        self.array, self.device, self.result, self.calls = array, device, result, []

    def __dlpack__(self, **kwargs):
        self.calls.append(kwargs)
        return self.result if self.result is not None else self.array.__dlpack__()

    def __dlpack_device__(self):
        return self.device


class OtherLanes:
    """Exports a NumPy array through its versioned capsule with the dtype's lanes rewritten to `lanes` (no
    torch dtype has lanes other than 1 but float4_e2m1fn_x2, so only such a producer shows a consumer reading
    the lanes)."""

    _LANES = 32 + 22  # DLManagedTensorVersioned's DLTensor, then its dtype's lanes (uint16)

    def __init__(self, array, lanes):
        self.array, self.lanes = array, lanes

    def __dlpack__(self, **kwargs):
        import ctypes

        from offset_producer import _capsule_pointer

        capsule = self.array.__dlpack__(max_version=(1, 0))
        ctypes.c_uint16.from_address(_capsule_pointer(capsule, b"dltensor_versioned") + self._LANES).value = self.lanes
        return capsule

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


class ReEntrant:
    """A producer whose __dlpack__ hands the object to `kernel` again, `depth` levels deep (None: until Python's
    recursion limit), and at the deepest level raises TypeError (issue 38.4). `calls` counts the __dlpack__ calls;
    past `budget` calls each one raises at once without going deeper, so a consumer that retries exponentially
    ends quickly, with `exhausted` set, instead of running for hours."""

    def __init__(self, kernel, depth=None, budget=100_000):
        self.kernel, self.depth, self.budget = kernel, depth, budget
        self.calls, self.level, self.deepest, self.exhausted = 0, 0, 0, False

    def __dlpack__(self, **kwargs):
        self.calls += 1
        if self.calls > self.budget:
            self.exhausted = True
            raise TypeError("ReEntrant: call budget exhausted")
        if self.depth is not None and self.level >= self.depth:
            raise TypeError("ReEntrant: the deepest level refuses")
        self.level += 1
        try:  # (RecursionError may come from any call, max() included)
            self.deepest = max(self.deepest, self.level)
            return self.kernel(self)
        finally:
            self.level -= 1

    def __dlpack_device__(self):
        return (1, 0)
