"""A Horovod hello-world: every rank contributes [rank + 1] * 4 to an allreduce and prints the result.

    horovodrun --gloo -np 2 -H localhost:2 python scripts/workers/hello_horovod.py
Each rank prints one JSON line starting with RESULT, which the course's launcher collects.
"""

import json
import os
import socket

import horovod.tensorflow as hvd
import tensorflow as tf

hvd.init()
mine = tf.constant([float(hvd.rank() + 1)] * 4)
summed = hvd.allreduce(mine, op=hvd.Sum)
averaged = hvd.allreduce(mine, op=hvd.Average)
gathered = hvd.allgather(tf.constant([hvd.rank()]))
print(
    "RESULT "
    + json.dumps(
        {
            "rank": hvd.rank(),
            "size": hvd.size(),
            "local_rank": hvd.local_rank(),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "sent": mine.numpy().tolist(),
            "sum": summed.numpy().tolist(),
            "average": averaged.numpy().tolist(),
            "allgather_ranks": gathered.numpy().tolist(),
        }
    ),
    flush=True,
)
