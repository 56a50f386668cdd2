"""A script path for ``spark-submit`` (which runs files, not ``-m`` modules)::

    spark-submit --master spark://host:7077 \\
        "$(python -c 'import nbmq.spark.submit as s; print(s.__file__)')" \\
        /shared/captures --out /shared/out

Arguments are those of ``nbmq pipeline``; ``--master`` may be left to spark-submit. Absolute
imports only, so it also runs as a plain file.
"""

import sys

from nbmq.cli.pipeline import main

if __name__ == "__main__":
    sys.exit(main())
