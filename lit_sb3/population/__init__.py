"""Population methods (ARS, ES, CEM, CMA-ES, PGPE, SNES, XNES) with ask/tell and the Stable-Baselines3 algorithm
interface."""

from lit_sb3.population.ars import ARS
from lit_sb3.population.base import PopulationAlgorithm
from lit_sb3.population.cem import CEM
from lit_sb3.population.cmaes import CMAES
from lit_sb3.population.es import ES
from lit_sb3.population.nes import SNES, XNES
from lit_sb3.population.optimizers import ClipUp
from lit_sb3.population.pgpe import PGPE

__all__ = ["ARS", "CEM", "CMAES", "ES", "PGPE", "SNES", "XNES", "ClipUp", "PopulationAlgorithm"]
