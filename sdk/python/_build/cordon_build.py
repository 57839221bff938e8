"""PEP 517 backend for offline installs: setuptools, as already installed on the machine.

pip normally builds in an isolated environment into which it downloads the build
requirements. This wrapper declares none, and imports the system's setuptools (Debian:
python3-setuptools and python3-wheel, which Debian's python3-pip depends on), so that
``pip install sdk/python`` needs no network.
"""

import site
import sys


def _backend():
    try:
        import setuptools.build_meta as bm  # noqa: F401
        import wheel  # noqa: F401  (setuptools < 70 builds wheels with it)
    except ImportError:
        # pip's build isolation hides the interpreter's site-packages: put them back, last.
        dirs = list(site.getsitepackages())
        try:
            dirs.append(site.getusersitepackages())
        except AttributeError:
            pass
        dirs += ["/usr/lib/python3/dist-packages"]
        for d in dirs:
            if d not in sys.path:
                sys.path.append(d)
        for m in [m for m in sys.modules if m == "setuptools" or m.startswith("setuptools.")]:
            del sys.modules[m]
        try:
            import setuptools.build_meta as bm
        except ImportError:
            raise RuntimeError("building the cordon SDK needs setuptools on this machine "
                               "(Debian: apt-get install python3-setuptools python3-wheel)")
    import setuptools.build_meta as bm
    return bm


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    return _backend().prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _backend().build_wheel(wheel_directory, config_settings, metadata_directory)


def build_sdist(sdist_directory, config_settings=None):
    return _backend().build_sdist(sdist_directory, config_settings)


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    return _backend().prepare_metadata_for_build_editable(metadata_directory, config_settings)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _backend().build_editable(wheel_directory, config_settings, metadata_directory)
