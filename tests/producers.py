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
