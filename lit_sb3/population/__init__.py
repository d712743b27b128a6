"""Population methods (ARS, ES, CEM, CMA-ES) with ask/tell and the Stable-Baselines3 algorithm interface."""

from lit_sb3.population.ars import ARS
from lit_sb3.population.base import PopulationAlgorithm
from lit_sb3.population.cem import CEM
from lit_sb3.population.cmaes import CMAES
from lit_sb3.population.es import ES

__all__ = ["ARS", "CEM", "CMAES", "ES", "PopulationAlgorithm"]
