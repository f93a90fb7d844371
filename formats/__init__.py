"""Network file formats (installed as ``petab_sciml.formats``), one module per format.

Each module exposes ``FORMAT``, a :class:`petab_sciml.plugins.NetworkFormat`, registered
under the ``petab_sciml.formats`` entry-point group.
"""
