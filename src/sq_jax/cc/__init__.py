"""Coupled cluster on sq_jax: equations, integrals, solvers, drivers and the CLI.

Example:
    >>> from sq_jax import cc
    >>> run = cc.ccsd()  # shipped H2O/STO-3G, spin-orbital CCSD, DIIS
    >>> round(run.e_corr, 8)
    -0.04943856
"""

from .drivers import CCRun as CCRun
from .drivers import ccd as ccd
from .drivers import ccsd as ccsd
from .drivers import ccsdt as ccsdt
from .drivers import solve_cc as solve_cc
from .eom import EOMResult as EOMResult
from .eom import eom_ee as eom_ee
from .eom import excitation_energy_derivative as excitation_energy_derivative
from .forces import RelaxedEnergy as RelaxedEnergy
from .forces import ccsd_energy_function as ccsd_energy_function
from .forces import relaxed_dipole as relaxed_dipole
from .forecast import DryRunReport as DryRunReport
from .forecast import dry_run as dry_run
from .geomopt import GeometryResult as GeometryResult
from .geomopt import optimize_geometry as optimize_geometry
from .implicit import ImplicitEnergy as ImplicitEnergy
from .implicit import converged_energy as converged_energy
from .implicit import implicit_energy as implicit_energy
from .integrals import spatial_integrals as spatial_integrals
from .integrals import spin_orbital_integrals as spin_orbital_integrals
from .lambda_ import rdm1 as rdm1
from .lambda_ import solve_lambda as solve_lambda
from .sequant_files import load_sequant_system as load_sequant_system
from .triples import ccsd_t as ccsd_t
from .triples import triples_inputs as triples_inputs
from .triples import triples_orbits as triples_orbits
from .triples import triples_program as triples_program
