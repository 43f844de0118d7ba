"""What each rank of an MPI launch is: Horovod started by `mpirun`, three steps of a tiny model trained with its
gradients averaged across ranks, and one line per rank.

    mpirun --host algo-1:2,algo-2:2 -np 4 python -m mpi4py mpi_ranks.py     (lesson 07, on the network lab)
Each rank prints one line `RESULT {json}`: its rank, the world size, its host, the SM_CURRENT_HOST it was given,
whether Horovod's controller is MPI, and a checksum of its weights (identical on every rank when the
broadcast and the averaging worked).
"""

import json
import os
import socket
import sys

import horovod.tensorflow as hvd
import tensorflow as tf

hvd.init()
w = tf.Variable(tf.random.stateless_normal([8, 1], seed=[hvd.rank(), 1]))  # different on every rank at first
hvd.broadcast_variables([w], root_rank=0)
x = tf.random.stateless_normal([16, 8], seed=[hvd.rank(), 2])  # each rank its own data
for _ in range(3):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((x @ w - 1.0) ** 2)
    tape = hvd.DistributedGradientTape(tape)
    w.assign_sub(0.1 * tape.gradient(loss, [w])[0])
record = {
    "rank": hvd.rank(),
    "size": hvd.size(),
    "local_size": hvd.local_size(),
    "host": socket.gethostname(),
    "sm_current_host": os.environ.get("SM_CURRENT_HOST"),
    "mpi": hvd.mpi_enabled(),
    "argv": sys.argv[1:],
    "checksum": float(tf.reduce_sum(w * tf.range(1.0, 9.0)[:, None])),
}
# One write per line: with PYTHONUNBUFFERED set, print() writes a line's text and its newline apart, and Open MPI
# may forward another rank's output between the two.
sys.stdout.write("RESULT " + json.dumps(record) + "\n")
