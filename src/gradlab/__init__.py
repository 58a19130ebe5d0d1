"""gradlab: compute, verify and time gradients, one module per method.

grads/ how a gradient is computed, check/ whether it is right, measure/ what it costs,
training/ one run (framework-free), reports/ comparisons of runs from their files, studies/ the
source articles' audits, app/ the Hydra, Lightning and W&B application.
"""

from gradlab.losses import mse_loss
from gradlab.models import MLP, build_model, three_layer_relu, two_layer_sigmoid

__all__ = ["MLP", "build_model", "mse_loss", "three_layer_relu", "two_layer_sigmoid"]
