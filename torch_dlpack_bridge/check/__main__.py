"""``python -m torch_dlpack_bridge.check [TARGET]``, or run by path where torch_dlpack_bridge is not installed."""

import sys

if __package__:
    from . import main
else:  # run by path (runpy.run_path): load the package beside this file without its parent
    import importlib.util
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location("tdb_check", os.path.join(here, "__init__.py"),
                                                  submodule_search_locations=[here])
    module = importlib.util.module_from_spec(spec)
    sys.modules["tdb_check"] = module
    spec.loader.exec_module(module)
    main = module.main

sys.exit(main(sys.argv[1:]))
