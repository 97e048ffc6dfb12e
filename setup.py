from setuptools import find_packages, setup

version = {}
with open("flux_sdexec/_version.py") as f:
    exec(f.read(), version)

setup(
    name="flux-sdexec",
    version=version["__version__"],
    description="Flux sdexec subprocess service as a Python broker module",
    packages=find_packages(exclude=["t", "t.*"]),
    python_requires=">=3.9",
    install_requires=["pystemd>=0.11", "cffi>=1.15"],
)
