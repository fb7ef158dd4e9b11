/* check_lesson.h - labvm.fcgi --check LESSON.json...: the teacher's check
 * (check_lesson.c). Returns the exit status. */
#ifndef LABVM_FCGI_CHECK_LESSON_H
#define LABVM_FCGI_CHECK_LESSON_H

int check_lesson_files(int n, char **files);

#endif
