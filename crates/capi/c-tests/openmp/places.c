/* Where the threads of a team run: prints "places P0 P1 ..." (the place, i.e. node, of each
 * thread of a team of argv[1] threads) and "ok places" if every thread ran. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 4;
    int place[64], ran = 0;
    #pragma omp parallel num_threads(n) reduction(+:ran)
    {
        place[omp_get_thread_num()] = omp_get_place_num();
        ran = 1;
    }
    printf("places");
    for (int t = 0; t < n; t++) printf(" %d", place[t]);
    printf("\n%s places %d of %d threads ran on %d places\n", ran == n ? "ok" : "WRONG", ran, n,
           omp_get_num_places());
    return ran == n ? 0 : 1;
}
